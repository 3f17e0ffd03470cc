"""JupyterLab, served locally and opened in headless chromium, draws a notebook's saved plotly figure with no network
(the `plotly_mimetype` output and the jupyterlab-plotly extension); skipped when chromium is absent."""

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _saved_figures(nb: Path) -> int:
    cells = json.loads(nb.read_text())["cells"]
    return sum("application/vnd.plotly.v1+json" in o.get("data", {}) for c in cells for o in c.get("outputs", []))


def test_figure_notebooks_save_their_figures_as_data():
    "Saved outputs carry the figure (plotly's JSON mimetype), not a script that fetches plotly.js from a CDN."
    for name in ("ground/00_geometry", "viz/01_figures"):
        assert _saved_figures(ROOT / "nbs" / f"{name}.ipynb") > 0, name


@contextlib.contextmanager
def _lab_server(folder: Path, env: dict | None = None):
    "JupyterLab serving `folder` on a free local port (no token, no network checks); yields the base URL."
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            f"--port={port}",
            "--allow-root",
            "--ServerApp.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={folder}",
            "--ServerApp.ip=127.0.0.1",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(
                "JupyterLab did not start: " + server.stderr.read()[-500:] if server.poll() is not None else "timeout"
            )
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def _lab_dom(folder: Path, notebook: str) -> str:
    "Open `notebook` of `folder` in JupyterLab in headless chromium; the DOM once the page has rendered."
    with _lab_server(folder) as url:
        res = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--virtual-time-budget=60000",
                "--window-size=1400,1000",
                "--dump-dom",
                f"{url}/lab/tree/{notebook}",
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert "jp-Notebook" in res.stdout, res.stdout[-500:]
    return res.stdout


@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_jupyterlab_draws_a_saved_figure_offline(tmp_path):
    shutil.copy(ROOT / "nbs" / "viz/01_figures.ipynb", tmp_path / "viz.ipynb")
    dom = _lab_dom(tmp_path, "viz.ipynb")
    assert 'class="main-svg"' in dom, "no plotly SVG in the notebook's DOM"  # the saved figure is drawn


def test_widget_notebook_saves_the_explorers_figure_in_its_widget_state():
    "The explorers' Output widgets hold their figure as plotly JSON (no CDN HTML) in the saved widget state."
    nb = json.loads((ROOT / "nbs" / "ui/00_widgets.ipynb").read_text())
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bundles = [o["data"] for w in state.values() if w["model_name"] == "OutputModel" for o in w["state"]["outputs"]]
    figures = [b for b in bundles if "application/vnd.plotly.v1+json" in b]
    assert figures and all("text/html" not in b for b in figures)


_COUNT_JS = (
    "JSON.stringify([document.querySelectorAll('.jp-OutputArea-output select').length, "
    "document.querySelectorAll('.jupyter-widget-output .main-svg, .widget-output .main-svg').length])"
)


async def _poll_page(url: str, seconds: float) -> list:
    """Open `url` in headless chromium (DevTools protocol) and poll `_COUNT_JS` until a widget figure shows or time runs
    out."""
    from choreographer import Browser

    async with Browser(path=CHROMIUM, headless=True) as browser:
        tab = await browser.create_tab(url)
        t0, counts = time.monotonic(), [0, 0]
        while time.monotonic() - t0 < seconds:
            await asyncio.sleep(1)
            reply = await tab.send_command("Runtime.evaluate", params={"expression": _COUNT_JS, "returnByValue": True})
            counts = json.loads(reply["result"]["result"].get("value") or "[0, 0]")
            if counts[1]:
                break
        return counts


@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_jupyterlab_restores_a_saved_widget_with_its_figure(tmp_path):
    """The explorer's output cell and the saved widget state, nothing else: once the notebook is trusted (widget views
    are
    not rendered for untrusted outputs) and its kernel connects, JupyterLab rebuilds the widget and draws its figure."""
    pytest.importorskip("choreographer")  # the DevTools client kaleido uses: waits in real time for the kernel
    nb = json.loads((ROOT / "nbs" / "ui/00_widgets.ipynb").read_text())
    views = [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code"
        and any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in c.get("outputs", []))
    ]
    assert views, "13_widgets saved no widget view"
    nb["cells"] = views[:1]
    (tmp_path / "w.ipynb").write_text(json.dumps(nb))
    env = {"JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data")}  # the signature database: not the user's
    subprocess.run(
        [sys.executable, "-m", "jupyter", "trust", str(tmp_path / "w.ipynb")],
        check=True,
        env={**os.environ, **env},
        capture_output=True,
    )
    with _lab_server(tmp_path, env) as url:
        selects, figures = asyncio.run(_poll_page(f"{url}/lab/tree/w.ipynb", 90))
    assert selects >= 2, "the widget's controls were not restored"
    assert figures >= 1, "the widget's figure was not drawn"
