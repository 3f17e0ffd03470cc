"""`hierbench view` as a user sees it: the workspace, HyperView's static bundle and its served page opened in headless
Chromium (points drawn, the labels listed, the bundle's Poincaré coordinates equal to hierbench's HoroPCA output), real
photos with HierarCaps captions, and every bad input as one line with nothing written. No network: HF_HUB_OFFLINE=1 and
a socket guard that refuses any address but this machine's. The HyperView tests need the [view] extra (CI builds a
second environment for them: `[dev]` cannot hold HyperView's numpy<2.4 and huggingface-hub<2.0)."""

import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # set before anything imports huggingface_hub

import numpy as np
import pytest
import torch

from eval_models import hierarcaps_sample
from hierbench.cli.parser import main
from hierbench.models.scorers import TextScorer, load_scorer
from hierbench.ui.view import VIEW_MARKER, build_view, folder_items, view_layouts, world_items
from hierbench.viz.figures import HoroPCA

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
try:
    import hyperview  # noqa: F401

    HAS_VIEW = True
except ImportError:
    HAS_VIEW = False
needs_view = pytest.mark.skipif(
    not HAS_VIEW, reason="HyperView is not installed (the [view] extra; CI tests it in .venv-view)"
)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
WORLD = ["--world", "--n-world", "25", "--world-splits", "test-iid"]


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    "Any connection to an address off this machine fails the test: nothing may download."
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (
            host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")
        ):
            raise AssertionError(f"network access to {address} during a view test")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.data.sources import WorldData

    out = tmp_path_factory.mktemp("run") / "meru"
    train_recipe(
        "meru",
        out,
        WorldData(n_train=128, cache_dir=False),
        arch="world-debug",
        steps=20,
        batch_size=32,
        log=lambda *a: None,
    )
    return out


@pytest.fixture(scope="module")
def world_bundle(run, tmp_path_factory):
    d = tmp_path_factory.mktemp("view")
    main(["view", "--scorer", f"hierbench:{run}", *WORLD, "--out", str(d / "ws"), "--static", str(d / "bundle")])
    return d


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


@pytest.fixture
def static_server():
    "Serve a folder on 127.0.0.1 (a static host, as a user would put the bundle on one)."
    servers = []

    def serve(folder):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/"

    yield serve
    for s in servers:
        s.shutdown()


def _chromium(url: str, tmp: Path, *args) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1400,900",
            "--virtual-time-budget=20000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _coloured_pixels(png: Path) -> tuple[int, int]:
    """Saturated pixels (the points: HyperView draws them in label colours, its disk, grid and text in greys) in the
    left and right half of the scatter area (left of the labels panel, below the panel headers)."""
    from PIL import Image

    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    h, w, _ = a.shape
    area = a[int(0.1 * h) : int(0.82 * h), : int(0.78 * w)]
    coloured = (area.max(-1) - area.min(-1)) > 45
    half = coloured.shape[1] // 2
    return int(coloured[:, :half].sum()), int(coloured[:, half:].sum())


@needs_view
def test_world_workspace_and_bundle_hold_hierbenchs_geometry(run, world_bundle):
    ws, bundle = world_bundle / "ws", world_bundle / "bundle"
    record = json.loads((ws / VIEW_MARKER).read_text())
    assert record["geometry"] == "lorentz" and set(record["layouts"]) == {"poincare", "euclidean"}
    assert not [p for p in world_bundle.iterdir() if p.name.startswith(".")]  # no temporary folder left
    # the same items and model through the library: the bundle's Poincaré coordinates are HoroPCA's output
    model = load_scorer(f"hierbench:{run}")
    view = build_view(model, world_items(25, ("test-iid",)))
    ref = HoroPCA(n_components=2, seed=0).fit_transform(view.embeddings.double(), view.curv)
    assert np.array_equal(ref, view.layouts["poincare"]["coords"])
    emb = json.loads((bundle / "api" / "embeddings" / f"{record['layouts']['poincare']}.json").read_text())
    assert emb["geometry"] == "poincare"
    row = {i: k for k, i in enumerate(view.items.table.id)}
    got = np.array(emb["coords"])
    order = [row[i] for i in emb["ids"]]
    assert sorted(order) == list(range(len(ref)))
    np.testing.assert_allclose(got, ref[order], atol=1e-6)  # float32 in the bundle, float64 in hierbench
    assert (np.linalg.norm(got, axis=1) < 1).all()
    # every sample carries its norm and parent caption
    shard = json.loads(next((bundle / "api" / "samples" / "shards").glob("*.json")).read_text())
    samples = shard["samples"] if isinstance(shard, dict) else shard
    meta = {s["id"]: s["metadata"] for s in samples}
    for i, r in enumerate(view.items.table.itertuples()):
        assert meta[r.id]["norm"] == pytest.approx(float(view.fields.norm[i]), rel=1e-5)
        assert meta[r.id]["parent"] == view.fields.parent[i] and meta[r.id]["kind"] == r.kind


@needs_view
@needs_chromium
def test_static_bundle_draws_the_points_in_chromium(world_bundle, static_server, tmp_path):
    url = static_server(world_bundle / "bundle")
    shot = tmp_path / "bundle.png"
    _chromium(url, tmp_path, f"--screenshot={shot}")
    left, right = _coloured_pixels(shot)
    assert left > 150 and right > 150, (left, right)  # points in the Poincaré disk and in the PCA panel
    dom = _chromium(url, tmp_path, "--dump-dom").stdout
    assert "Poincaré (HoroPCA)" in dom and "Euclidean (PCA)" in dom
    for cls in ("triangle", "square", "circle"):
        assert f">{cls}<" in dom, cls  # the labels panel lists the classes
    if os.environ.get("HIERBENCH_VIEW_SCREENSHOT"):
        shutil.copy(shot, os.environ["HIERBENCH_VIEW_SCREENSHOT"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cdp_screenshot(url: str, png: Path, profile: Path, wait_s: float = 15.0):
    """A screenshot after `wait_s` real seconds, through Chromium's DevTools protocol: a live HyperView page keeps a
    connection open, so `--virtual-time-budget` (which waits for the network to go quiet) would wait forever."""
    import base64
    import time
    import urllib.request
    from websockets.sync.client import connect

    port = _free_port()
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            "--remote-allow-origins=*",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(150):
            try:
                tabs = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=1))
                break
            except OSError:
                time.sleep(0.2)
        with connect(next(t["webSocketDebuggerUrl"] for t in tabs if t["type"] == "page"), max_size=2**26) as ws:
            calls = iter(range(1, 100))

            def call(method, **params):
                i = next(calls)
                ws.send(json.dumps({"id": i, "method": method, "params": params}))
                while True:
                    msg = json.loads(ws.recv(timeout=60))
                    if msg.get("id") == i:
                        return msg.get("result", {})

            call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
            call("Page.navigate", url=url)
            time.sleep(wait_s)
            png.write_bytes(base64.b64decode(call("Page.captureScreenshot", format="png")["data"]))
    finally:
        proc.terminate()
        proc.wait(10)


@needs_view
@needs_chromium
def test_served_workspace_draws_the_points(world_bundle, tmp_path):
    pytest.importorskip("websockets")
    from hierbench.ui.view import serve_workspace

    session = serve_workspace(world_bundle / "ws", port=_free_port(), block=False)
    try:
        shot = tmp_path / "served.png"
        _cdp_screenshot(session.url, shot, tmp_path / "profile")
        left, right = _coloured_pixels(shot)
        assert left > 150 and right > 150, (left, right)
    finally:
        session.stop()


@needs_view
@pytest.mark.skipif(
    not (SHARED / "hierarcaps" / "test_imgs").is_dir(), reason="../shared/data is absent (a user's clone)"
)
def test_photos_with_hierarcaps_captions(tmp_path):
    "Real photos, HierarCaps' CSV as the captions file (its ids kept), a ViT with open_clip's tokenizer."
    import pandas as pd

    from hierbench.models.family import create_model, save_model

    _, caps = hierarcaps_sample(tmp_path, 6)
    df = pd.read_csv(caps)
    save_model(create_model("real-tiny", geometry="lorentz"), tmp_path / "m" / "model.safetensors")
    main(
        [
            "view",
            "--scorer",
            f"hierbench:{tmp_path / 'm'}",
            "--images",
            str(tmp_path / "imgs"),
            "--captions",
            str(tmp_path / "caps.csv"),
            "--out",
            str(tmp_path / "ws"),
            "--color-by",
            "depth",
        ]
    )
    rec = json.loads((tmp_path / "ws" / VIEW_MARKER).read_text())
    items = folder_items(tmp_path / "imgs", tmp_path / "caps.csv")
    assert (
        rec["images"] == 6
        and rec["samples"] == len(items.table)
        and sorted(items.table.source[:6]) == sorted(map(str, df.id))
    )
    assert set(items.table.label[:6]) == {c.split("=>")[0].strip() for c in df.captions}  # HierarCaps' general concept


def _one_line_failure(argv, out: Path, capsys=None) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    msg = str(e.value.code)
    assert msg.startswith("hierbench view: ") and "\n" not in msg, msg
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith("." + out.name)], (
        "half-written"
    )
    return msg


def test_bad_inputs_are_one_line_and_write_nothing(run, tmp_path, monkeypatch):
    if not HAS_VIEW:  # without HyperView the first check already stops every case: that is the missing-extra case
        msg = _one_line_failure(
            ["view", "--scorer", f"hierbench:{run}", *WORLD, "--out", str(tmp_path / "ws")], tmp_path / "ws"
        )
        assert "pip install 'hierbench[view]'" in msg
        return
    out = tmp_path / "ws"
    (tmp_path / "empty").mkdir()
    assert "no images" in _one_line_failure(
        ["view", "--scorer", f"hierbench:{run}", "--images", str(tmp_path / "empty"), "--out", str(out)], out
    )
    from PIL import Image

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (40, 30), "blue").save(tmp_path / "imgs" / "here.jpg")
    (tmp_path / "caps.csv").write_text("image,caption\nhere.jpg,a blue square\nelsewhere.jpg,a cat\n")
    msg = _one_line_failure(
        [
            "view",
            "--scorer",
            f"hierbench:{run}",
            "--images",
            str(tmp_path / "imgs"),
            "--captions",
            str(tmp_path / "caps.csv"),
            "--out",
            str(out),
        ],
        out,
    )
    assert "elsewhere.jpg" in msg and "caps.csv" in msg
    import hierbench.models.scorers as SC

    monkeypatch.setattr(SC, "load_scorer", lambda *a, **k: TextScorer(lambda t: torch.randn(len(t), 8), "st:minilm"))
    assert "text-only" in _one_line_failure(["view", "--scorer", "st:minilm", *WORLD, "--out", str(out)], out)

    class Spherical(TextScorer):
        has_images = True

    sph = Spherical(lambda t: torch.randn(len(t), 8), "a spherical model")
    sph.head.geometry = "spherical"
    monkeypatch.setattr(SC, "load_scorer", lambda *a, **k: sph)
    assert "no HyperView layout" in _one_line_failure(["view", "--scorer", "x:y", *WORLD, "--out", str(out)], out)
    monkeypatch.undo()
    monkeypatch.setitem(__import__("sys").modules, "hyperview", None)
    assert "pip install 'hierbench[view]'" in _one_line_failure(
        ["view", "--scorer", f"hierbench:{run}", *WORLD, "--out", str(out)], out
    )


def test_layouts_without_hyperview():
    "The layouts are pure hierbench: the Poincaré one only for a Lorentz head."
    x = torch.randn(30, 6) * 0.5
    lay = view_layouts(x, "lorentz", 1.0)
    assert set(lay) == {"poincare", "euclidean"} and (np.linalg.norm(lay["poincare"]["coords"], axis=1) < 1).all()
    assert set(view_layouts(torch.nn.functional.normalize(x, dim=-1), "euclidean")) == {"euclidean"}


def test_fields_and_colours_on_a_euclidean_model():
    "A Euclidean model: radii from the empty text, parents closer to it, and each --color-by choice as labels."
    from hierbench.evaluation.encoding import WordHashModel
    from hierbench.ui.view import COLOR_BY, color_labels

    model = WordHashModel(dim=16)
    items = world_items(6, ("test-iid",), cache_dir=False)
    view = build_view(model, items)
    assert set(view.layouts) == {"euclidean"} and view.geometry == "euclidean"
    norm_of = dict(zip(items.table.text, view.fields.norm))
    assert all(norm_of[p] < n for p, n in zip(view.fields.parent, view.fields.norm) if p)
    for c in COLOR_BY:
        assert len(color_labels(view, c)) == len(items.table)
    assert len(set(color_labels(view, "norm"))) == 4 and set(color_labels(view, "kind")) == {"image", "text"}
    with pytest.raises(ValueError, match="--color-by"):
        color_labels(view, "colour")


@needs_view
def test_hyper_models_runs_the_onnx_image_tower(tmp_path):
    "The ONNX notebook's claim: hyper-models' own ONNX runner takes hierbench's image.onnx from a local path."
    pytest.importorskip("onnxscript")
    from PIL import Image
    from hyper_models.models import ONNXModel
    from hyper_models.preprocessing import ImageConfig
    from hierbench.models.family import create_model
    from hierbench.models.onnx_export import OnnxScorer, export_onnx, hyperboloid

    export_onnx(create_model("world-debug", geometry="lorentz"), tmp_path / "onnx")
    cfg = json.loads((tmp_path / "onnx" / "config.json").read_text())
    p = cfg["preprocessing"]
    hm = ONNXModel(
        tmp_path / "onnx" / "image.onnx",
        "hyperboloid",
        cfg["embed_dim"] + 1,
        input_name="image",
        output_name="embedding_hyperboloid",
        image_config=ImageConfig(size=p["image_size"], mean=tuple(p["mean"]), std=tuple(p["std"])),
    )
    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    got = hm.encode_images([img])
    sc = OnnxScorer(tmp_path / "onnx")
    from hierbench.data.batch import image_to_tensor

    ref = hyperboloid(sc.encode_image(image_to_tensor(img, 64, sc.image_mean, sc.image_std)[None]), cfg["curvature"])
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-5)


def _photos(folder: Path, classes=(None, None, "birds", "birds")) -> Path:
    "Photos without captions: a flat file each, or one in a class subfolder."
    from PIL import Image

    for k, cls in enumerate(classes):
        d = folder / cls if cls else folder
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (48, 40), (40 * k, 200 - 40 * k, 90)).save(d / f"p{k}.jpg")
    return folder


@pytest.mark.parametrize("geometry", ["lorentz", "euclidean"])
def test_photos_without_captions_have_norms_and_no_parents(tmp_path, geometry):
    "Issue 46: the README's `view --images photos/` (no --captions) ended in `IndexError: argmax()` in item_fields."
    from hierbench.models.family import create_model

    items = folder_items(_photos(tmp_path / "photos"))
    assert (
        items.n_images == 4 and items.texts == [] and sorted(items.table.label) == ["birds", "birds", "image", "image"]
    )
    view = build_view(create_model("world-debug", geometry=geometry).eval(), items)
    assert (
        view.fields.parent.tolist() == [""] * 4 and np.isfinite(view.fields.norm).all() and (view.fields.norm > 0).all()
    )
    assert {g: lay["coords"].shape for g, lay in view.layouts.items()} == {g: (4, 2) for g in view.layouts}


@needs_view
def test_the_readmes_view_of_photos_without_captions(run, tmp_path):
    """`hierbench view --scorer … --images photos/ --out ws/ --static site/`, the README's line, on photos with no
    captions file."""
    main(
        [
            "view",
            "--scorer",
            f"hierbench:{run}",
            "--images",
            str(_photos(tmp_path / "photos")),
            "--out",
            str(tmp_path / "ws"),
            "--static",
            str(tmp_path / "site"),
        ]
    )
    rec = json.loads((tmp_path / "ws" / VIEW_MARKER).read_text())
    assert rec["images"] == rec["samples"] == 4 and set(rec["layouts"]) == {"poincare", "euclidean"}
    assert (tmp_path / "site" / "hyperview-static.json").is_file()


@needs_view
def test_two_models_make_one_workspace_over_the_same_samples(tmp_path):
    "`explain --models --workspace`: both models' spaces over the same samples, each model's layout in its own panel."
    from hierbench.config import SettingsError
    from hierbench.models.family import create_model
    from hierbench.ui.view import export_static, write_workspace

    items = world_items(6, ("test-iid",))
    va = build_view(create_model("world-debug", geometry="lorentz"), items, name="argent")
    vb = build_view(create_model("world-debug"), items, name="clip")
    res = write_workspace([va, vb], tmp_path / "ws")
    record = json.loads((tmp_path / "ws" / VIEW_MARKER).read_text())
    assert record["models"] == ["argent", "clip"] and set(record["layouts"]) == {"argent", "clip"}
    assert res["layouts"] == record["layouts"] and len(set(res["layouts"].values())) == 2
    export_static(tmp_path / "ws", tmp_path / "bundle")
    row = {i: k for k, i in enumerate(items.table.id)}
    for view, g in ((va, "poincare"), (vb, "euclidean")):
        emb = json.loads(
            (tmp_path / "bundle" / "api" / "embeddings" / f"{record['layouts'][view.model_name]}.json").read_text()
        )
        order = [row[i] for i in emb["ids"]]
        assert sorted(order) == list(range(len(items.table)))  # every sample in both spaces
        np.testing.assert_allclose(np.array(emb["coords"]), view.layouts[g]["coords"][order], atol=1e-5)
    shard = json.loads(next((tmp_path / "bundle" / "api" / "samples" / "shards").glob("*.json")).read_text())
    samples = shard["samples"] if isinstance(shard, dict) else shard
    meta = {s["id"]: s["metadata"] for s in samples}
    first = items.table.id[0]
    assert meta[first]["norm argent"] == pytest.approx(float(va.fields.norm[0]), rel=1e-5)
    assert meta[first]["norm clip"] == pytest.approx(float(vb.fields.norm[0]), rel=1e-5)
    other = build_view(create_model("world-debug"), world_items(5, ("test-iid",)), name="clip-5")
    for views, words in (([va, other], "same items"), ([va, va], "a name for each")):
        with pytest.raises(SettingsError, match=words):
            write_workspace(views, tmp_path / "refused")
        assert not (tmp_path / "refused").exists()
