"""JupyterLab, served locally and opened in headless chromium, draws a notebook's saved plotly figure with no network
(the `plotly_mimetype` output and the jupyterlab-plotly extension); skipped when chromium is absent."""
import json, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _saved_figures(nb: Path) -> int:
    cells = json.loads(nb.read_text())["cells"]
    return sum("application/vnd.plotly.v1+json" in o.get("data", {}) for c in cells for o in c.get("outputs", []))


def test_figure_notebooks_save_their_figures_as_data():
    "Saved outputs carry the figure (plotly's JSON mimetype), not a script that fetches plotly.js from a CDN."
    for name in ("00_geometry", "12_viz"):
        assert _saved_figures(ROOT / "nbs" / f"{name}.ipynb") > 0, name


@pytest.mark.timeout(300)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_jupyterlab_draws_a_saved_figure_offline(tmp_path):
    shutil.copy(ROOT / "nbs" / "12_viz.ipynb", tmp_path / "viz.ipynb")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--allow-root",
                               "--ServerApp.token=", "--ServerApp.password=", f"--ServerApp.root_dir={tmp_path}",
                               "--ServerApp.ip=127.0.0.1", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=1); break
            except OSError: time.sleep(0.5)
        else: pytest.fail("JupyterLab did not start: " + server.stderr.read()[-500:] if server.poll() is not None else "timeout")
        res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000",
                              "--window-size=1400,1000", "--dump-dom", f"http://127.0.0.1:{port}/lab/tree/viz.ipynb"],
                             capture_output=True, text=True, timeout=180)
        dom = res.stdout
        assert "jp-Notebook" in dom, dom[-500:]
        assert 'class="main-svg"' in dom, "no plotly SVG in the notebook's DOM"   # the saved figure is drawn
    finally:
        server.terminate()
        try: server.wait(10)
        except subprocess.TimeoutExpired: server.kill()
