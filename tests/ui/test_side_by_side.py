"""Two models side by side (issue 53, part 3): a ledger row's two arms over the same test scenes, from the weights a
compare folder or this machine's cache of retrained runs holds, or the user's own; the page's panels share their
items, the command refuses in one line and writes nothing when a weight is missing."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from eval_models import hierarcaps_sample
from hierbench.config import MissingFileError
from hierbench.ledger.compare import parent_cache
from hierbench.ledger.explain import ExplainError, models_page_name, page_name, recomputed_ledger, row_seeds
from hierbench.ledger.records import read_records
from hierbench.ledger.run_folder import run_dir
from hierbench.models.family import create_model, save_model
from hierbench.ui.side_by_side import (
    arm_weights,
    panels_figure,
    point_traces,
    representative_seed,
    row_weights,
    side_by_side,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "nbs" / "results" / "data" / "ledger-standard"


@pytest.fixture
def cached_parents(tmp_path, monkeypatch):
    """This machine's cache of retrained runs (`compare --from-records`) holding ARG-4's arms at each row's
    representative seed: two untrained world models, one of each geometry."""
    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    found = recomputed_ledger(RECORDS)
    rows = found["ledger"][found["ledger"].id == "ARG-4"].to_dict("records")
    runs = {(r["recipe"], r["seed"]): r for r in read_records(RECORDS).runs}
    placed = {}
    for row in rows:
        seed = representative_seed(row_seeds(row, found["results"])["table"])
        for arm in (row["a"], row["b"]):
            geometry = "lorentz" if arm in ("argent", "hycoclip", "meru") else "euclidean"
            path = parent_cache(runs[(arm, seed)]) / "model.safetensors"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                save_model(create_model("world-debug", geometry=geometry), path)
            placed[(arm, seed)] = path
    return rows, placed


def test_the_two_arms_share_every_item_and_the_angles_cover_every_level():
    a, b = create_model("world-debug", geometry="lorentz"), create_model("world-debug")
    sbs = side_by_side(a, b, names=("a", "b"), n_scenes=8)
    assert [len(v.embeddings) for v in sbs.views] == [len(sbs.items.table)] * 2
    fig = panels_figure(sbs)
    i, j = point_traces(fig)
    assert list(fig.data[i].customdata) == list(fig.data[j].customdata) == list(range(len(sbs.items.table)))
    assert sum(t.mode == "lines" for t in fig.data) == 1  # the Poincaré disk, in the Lorentz panel only
    pos = sbs.angles[sbs.angles.level != "negative"]
    assert len(pos) == 2 * 4 * 8 and np.isfinite(sbs.angles.phi).all()
    assert (sbs.angles.phi >= 0).all() and (sbs.angles.phi <= np.pi).all()
    by_model = [pos[pos.model == m].phi.to_numpy() for m in ("a", "b")]
    assert not np.allclose(*by_model)  # each model's own angles over the same pairs


def test_the_representative_seed_and_the_weights_a_compare_folder_keeps(tmp_path):
    import pandas as pd

    seeds = pd.DataFrame(dict(seed=[3, 5, 8], diff=[0.0, 0.3, 0.1], used=[True, True, False]))
    assert representative_seed(seeds) in (3, 5)  # 0.15 is as near 0.0 as 0.3; never the unused seed 8
    weights = run_dir(tmp_path, "clip", 4) / "model.safetensors"
    weights.parent.mkdir(parents=True)
    save_model(create_model("world-debug"), weights)
    assert arm_weights(tmp_path, "clip", 4) == weights
    with pytest.raises(MissingFileError, match="no weights of clip seed 5"):
        arm_weights(tmp_path, "clip", 5)


def test_records_find_the_weights_this_machine_retrained(cached_parents):
    rows, placed = cached_parents
    for row in rows:
        seed, paths = row_weights(RECORDS, row)
        assert paths == [placed[(row["a"], seed)], placed[(row["b"], seed)]]
    with pytest.raises(ExplainError, match="no seed 999"):
        row_weights(RECORDS, rows[0], seed=999)
    with pytest.raises(ExplainError, match="two files"):
        row_weights(RECORDS, rows[0], weights=["one.safetensors"])


def test_the_command_writes_each_rows_models_page_linked_from_its_page(cached_parents, tmp_path, monkeypatch, capsys):
    from hierbench.cli.parser import main

    rows, _ = cached_parents
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
    import hierbench.ledger.explain as E

    calls, real = [], E.recomputed_ledger
    monkeypatch.setattr(E, "recomputed_ledger", lambda src: calls.append(src) or real(src))
    out = tmp_path / "pages"
    main(["explain", str(RECORDS), "ARG-4", "--out", str(out), "--models", "--scenes", "6"])
    assert len(calls) == 2  # the pages' ledger and the weights' (once for every row), not one more per row
    for row in rows:
        page, models = out / page_name(row), out / models_page_name(row)
        assert f"href='{models.name}'" in page.read_text()
        html = models.read_text()
        assert "plotly_selected" in html and f"href='{page.name}'" in html and row["a"] in html and row["b"] in html
    assert "https://" not in (out / models_page_name(rows[0])).read_text()  # plotly.js beside it, nothing fetched


def test_a_missing_weight_is_one_line_and_nothing_is_written(tmp_path, monkeypatch):
    from hierbench.cli.parser import main

    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    for extra in (["--models"], ["--weights", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")]):
        with pytest.raises(SystemExit) as exit_:
            main(["explain", str(RECORDS), "ARG-4", "--out", str(tmp_path / "x"), *extra])
        msg = str(exit_.value.code)
        assert msg.startswith("hierbench explain: ") and "\n" not in msg
        assert "no weights of" in msg or "no such weights file" in msg
        assert not (tmp_path / "x").exists()


@pytest.fixture
def fake_training(tmp_path, monkeypatch, capsys):
    """`explain --models --retrain` with the training replaced (a standard run takes minutes): the real
    `retrain_recorded` copies cached parents and fills the cache, but `_train_runs` writes an untrained world model and
    logs what it trained, what was printed before and whether a fine-tune's parent was there first."""
    import hierbench.ledger.compare as C
    import hierbench.ui.side_by_side as S
    from hierbench.recipes.registry import get_recipe

    monkeypatch.setenv("HIERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    trained = []

    def train(recipe, seeds, budget, out, decoder=None, quiet=True):
        for s in seeds:
            parent = run_dir(out, recipe.init_from, s) / "model.safetensors" if recipe.stage == "finetune" else None
            trained.append(((recipe.name, s), capsys.readouterr().out, parent is None or parent.is_file()))
            save_model(
                create_model("world-debug", geometry=recipe.geometry),
                run_dir(out, recipe.name, s) / "model.safetensors",
            )
        return 1.0

    monkeypatch.setattr(C, "_train_runs", train)
    monkeypatch.setattr(C, "evaluate_run", lambda model, eval_data, items=None: {})
    monkeypatch.setattr(S, "build_eval_data", lambda budget: {})
    found = recomputed_ledger(RECORDS)
    (row,) = found["ledger"][found["ledger"].id == "DEG-4"].to_dict("records")  # degla fine-tunes clip
    seed = representative_seed(row_seeds(row, found["results"])["table"])
    runs = {(r["recipe"], r["seed"]): r for r in read_records(RECORDS).runs}
    assert get_recipe("degla").init_from == "clip"
    return row, seed, runs, trained


def test_without_retrain_the_refusal_says_what_retraining_would_cost_and_writes_nothing(fake_training, tmp_path):
    from hierbench.cli.parser import main

    row, seed, runs, trained = fake_training
    with pytest.raises(SystemExit) as exit_:
        main(["explain", str(RECORDS), "DEG-4", "--out", str(tmp_path / "x"), "--models"])
    msg = str(exit_.value.code)
    assert msg.startswith(f"hierbench explain: no weights of clip seed {seed}, degla seed {seed} ") and "\n" not in msg
    recorded = runs[("clip", seed)]["train_seconds"] + runs[("degla", seed)]["train_seconds"]
    from hierbench.ledger.progress import duration

    assert "--retrain" in msg and f"clip seed {seed}" in msg and f"about {duration(recorded)} as recorded" in msg
    assert not (tmp_path / "x").exists() and not (tmp_path / "cache").exists() and trained == []


def test_retrain_says_its_cost_then_trains_only_the_missing_runs_and_a_second_explain_none(
    fake_training, tmp_path, capsys
):
    from hierbench.cli.parser import main

    row, seed, runs, trained = fake_training
    clip = parent_cache(runs[("clip", seed)])  # CLIP's run is cached already: degla starts from it, not retrained
    clip.mkdir(parents=True)
    save_model(create_model("world-debug"), clip / "model.safetensors")
    (clip / "retrained.json").write_text('{"weights_sha256": "x", "train_seconds": 1.0}')
    out = tmp_path / "pages"
    argv = ["explain", str(RECORDS), "DEG-4", "--out", str(out), "--models", "--retrain", "--scenes", "6"]
    main(argv)
    assert [t[0] for t in trained] == [("degla", seed)]  # exactly the missing run
    cost = [l for l in trained[0][1].splitlines() if l.startswith("explain: retraining")]
    assert len(cost) == 1 and f"1 run(s) of the records, degla seed {seed}" in cost[0]
    assert str(tmp_path / "cache" / "retrained") in cost[0] and trained[0][2]  # where they go; the parent was there
    degla = parent_cache(runs[("degla", seed)])
    assert (degla / "model.safetensors").is_file() and (degla / "retrained.json").is_file()
    assert [p.name for p in (tmp_path / "cache" / "retrained").iterdir() if p.name.startswith("explain-")] == []
    assert (out / models_page_name(row)).is_file()
    capsys.readouterr()
    main(argv)  # the cache has both now
    assert len(trained) == 1 and "retraining" not in capsys.readouterr().out


def test_retrain_trains_a_fine_tunes_parent_first_when_neither_is_cached(fake_training, tmp_path):
    from hierbench.ui.side_by_side import retrain_plan, retrain_runs

    row, seed, runs, trained = fake_training
    todo = retrain_plan(RECORDS, [row])
    assert [(r["recipe"], r["seed"]) for r in todo] == [("clip", seed), ("degla", seed)]
    paths = retrain_runs(RECORDS, todo)
    assert [t[0] for t in trained] == [("clip", seed), ("degla", seed)] and all(t[2] for t in trained)
    assert paths == [parent_cache(runs[k]) / "model.safetensors" for k in (("clip", seed), ("degla", seed))]
    assert all(p.is_file() for p in paths) and retrain_plan(RECORDS, [row]) == []
    assert row_weights(RECORDS, row) == (seed, [paths[1], paths[0]])  # A is degla, B clip


SHARED = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="module")
def real_tiny_pair(tmp_path_factory):
    """Two randomly initialised models of a real architecture (`real-tiny`: open_clip's tokenizer, a small ViT) on
    disk as a researcher has them: a hierbench Lorentz model and an open_clip export of a Euclidean one."""
    from hierbench.models.export import export_open_clip

    d = tmp_path_factory.mktemp("models")
    save_model(create_model("real-tiny", geometry="lorentz"), d / "lorentz" / "model.safetensors")
    oc = export_open_clip(create_model("real-tiny"), d / "clip")["weights"]
    return f"hierbench:{d / 'lorentz'}", f"open_clip:real-tiny@{oc}"


def _photos(folder: Path) -> list[list[str]]:
    "Five synthetic photos and a JSONL captions file giving each a three-level chain; returns the chains."
    from PIL import Image

    folder.mkdir()
    colours, chains = ["red", "green", "blue", "yellow", "black"], []
    with open(folder / "caps.jsonl", "w") as f:
        for c in colours:
            Image.new("RGB", (48, 64), c).save(folder / f"{c}.jpg")
            chains.append(["a colour", f"a {c} patch", f"a {c} patch filling the frame"])
            f.write(f'{{"image": "{c}.jpg", "captions": {chains[-1]!r}}}\n'.replace("'", '"'))
    return chains


def test_view_compare_draws_two_real_models_over_the_same_photos(real_tiny_pair, tmp_path, capsys):
    from hierbench.cli.parser import main
    from hierbench.ui.side_by_side import real_items

    _photos(tmp_path / "photos")
    a, b = real_tiny_pair
    out = tmp_path / "page"
    args = ["--images", str(tmp_path / "photos"), "--captions", str(tmp_path / "photos" / "caps.jsonl")]
    main(["view", "--compare", a, b, *args, "--out", str(out)])
    assert f"wrote {out / 'models.html'}" in capsys.readouterr().out
    html = (out / "models.html").read_text()
    assert a in html and b in html and "plotly_selected" in html and (out / "plotly.min.js").is_file()
    assert "arccos of their cosine similarity" in html and "https://" not in html
    items, chains = real_items(tmp_path / "photos", tmp_path / "photos" / "caps.jsonl")
    assert [len(c) for c in chains] == [3] * 5 and len(items.table) == 5 + 1 + 10  # 'a colour' once


def test_the_angles_of_real_items_are_each_models_own_by_level():
    """Each model's φ(caption, image) over the same pairs: the Lorentz exterior angle for one, the arccos of the
    cosine similarity for the other — recomputed here from its embeddings."""
    import tempfile

    import torch

    from hierbench.evaluation.encoding import entailment_angle
    from hierbench.ui.side_by_side import real_items, side_by_side_items

    with tempfile.TemporaryDirectory() as d:
        chains = _photos(Path(d) / "p")
        items, got = real_items(Path(d) / "p", Path(d) / "p" / "caps.jsonl")
        a, b = create_model("real-tiny", geometry="lorentz"), create_model("real-tiny")
        sbs = side_by_side_items(a, b, items, got, names=("hyp", "euc"))
    assert sorted(map(tuple, got)) == sorted(map(tuple, chains))
    assert len(sbs.angles) == 2 * 5 * 3 and set(sbs.angles.level) == {"0", "1", "2"}
    e = sbs.views[1].embeddings
    rows = {t: i for i, t in enumerate(items.table.text)}
    want = [
        float(torch.arccos(torch.cosine_similarity(e[i].double(), e[rows[c]].double(), dim=0)))
        for i, ch in enumerate(got)
        for c in ch
    ]
    assert np.allclose(sbs.angles[sbs.angles.model == "euc"].phi.to_numpy(), want)
    h = sbs.views[0]
    lor = [
        float(entailment_angle(h.embeddings[[rows[c]]], h.embeddings[[i]], "lorentz", h.curv))
        for i, ch in enumerate(got)
        for c in ch
    ]
    assert np.allclose(sbs.angles[sbs.angles.model == "hyp"].phi.to_numpy(), lor)
    assert not np.allclose(lor, want)


def test_a_model_whose_embeddings_are_not_finite_is_refused(tmp_path):
    import torch

    from hierbench.config import SettingsError
    from hierbench.ui.side_by_side import real_items, side_by_side_items

    _photos(tmp_path / "p")
    items, chains = real_items(tmp_path / "p", tmp_path / "p" / "caps.jsonl")
    broken = create_model("real-tiny")
    with torch.no_grad():
        next(broken.parameters()).fill_(float("nan"))
    with pytest.raises(SettingsError, match="broken: its embeddings .* are not finite"):
        side_by_side_items(create_model("real-tiny", geometry="lorentz"), broken, items, chains, names=("ok", "broken"))


@pytest.mark.skipif(
    not (SHARED / "hierarcaps" / "test_imgs").is_dir(), reason="../shared/data is absent (a user's clone)"
)
def test_hierarcaps_photos_with_their_four_level_chains(real_tiny_pair, tmp_path):
    "Six HierarCaps COCO photos with their 4-level chains, two real-architecture models loaded from files."
    from hierbench.models.scorers import load_scorer
    from hierbench.ui.side_by_side import real_items, side_by_side_items, side_by_side_page

    hierarcaps_sample(tmp_path, 6)
    items, chains = real_items(tmp_path / "imgs", tmp_path / "caps.csv")
    assert [len(c) for c in chains] == [4] * 6
    a, b = real_tiny_pair
    sbs = side_by_side_items(load_scorer(a), load_scorer(b), items, chains, names=("hyp", "clip"))
    assert [v.geometry for v in sbs.views] == ["lorentz", "euclidean"]
    assert len(sbs.angles) == 2 * 6 * 4 and np.isfinite(sbs.angles.phi).all()
    assert "Angles by level" in side_by_side_page(sbs)


def test_view_compare_refusals_are_one_line_and_write_nothing(real_tiny_pair, tmp_path, monkeypatch):
    from hierbench.cli.parser import main

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    _photos(tmp_path / "p")
    a, b = real_tiny_pair
    imgs, caps = ["--images", str(tmp_path / "p")], ["--captions", str(tmp_path / "p" / "caps.jsonl")]
    cases = {
        "model not found": ([a, "hierbench:" + str(tmp_path / "none.safetensors")], imgs + caps),
        "not a folder": ([a, b], ["--images", str(tmp_path / "nowhere")]),
        "captions file not found": ([a, b], imgs + ["--captions", str(tmp_path / "none.csv")]),
        "the same model twice": ([a, a], imgs + caps),
        "--compare draws real items": ([a, b], ["--world"]),
        "--serve and --static": ([a, b], imgs + caps + ["--serve"]),
    }
    for said, (models, rest) in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main(["view", "--compare", *models, *rest, "--out", str(tmp_path / "out")])
        msg = str(exit_.value.code)
        assert msg.startswith("hierbench view: ") and "\n" not in msg and said in msg, (said, msg)
        assert not (tmp_path / "out").exists()


def test_view_compare_workspace_holds_both_spaces_or_is_refused_without_hyperview(
    real_tiny_pair, tmp_path, monkeypatch
):
    "With the [view] extra: the page and one workspace of both; without: one line naming the extra, nothing written."
    import importlib.util

    from hierbench.cli.parser import main

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    _photos(tmp_path / "p")
    a, b = real_tiny_pair
    argv = [
        "view",
        "--compare",
        a,
        b,
        "--images",
        str(tmp_path / "p"),
        "--captions",
        str(tmp_path / "p" / "caps.jsonl"),
    ]
    argv += ["--out", str(tmp_path / "out"), "--workspace", str(tmp_path / "ws")]
    if importlib.util.find_spec("hyperview") is None:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert "hierbench[view]" in str(exit_.value.code) and "\n" not in str(exit_.value.code)
        assert not (tmp_path / "out").exists() and not (tmp_path / "ws").exists()
    else:
        from hierbench.ui.view import VIEW_MARKER

        main(argv)
        assert (tmp_path / "out" / "models.html").is_file()
        assert json.loads((tmp_path / "ws" / VIEW_MARKER).read_text())["samples"] == 5 + 1 + 10
