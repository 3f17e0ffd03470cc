"""Re-execute notebooks and save their outputs — figures as plotly's JSON mimetype (JupyterLab draws them offline),
widget state in the notebook metadata (JupyterLab restores the widgets) — then nbdev-clean them.

    .venv/bin/python tools/save_outputs.py nbs/viz/01_figures.ipynb nbs/ui/00_widgets.ipynb

Cells flagged `#| slow` run too (set IN_TEST=1 to shrink lesson work the way nbdev-test does); cells flagged
`#| eval: false` are skipped and keep their saved output, as nbdev-test skips them. Commit the notebooks afterwards;
CI checks that nbdev-clean leaves them unchanged.
"""

import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def save_outputs(path: Path, timeout: int = 900) -> float:
    "Execute `path` in its own folder, store outputs and widget state, write it back; returns seconds taken."
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and not re.search(r"^\s*#\|\s*eval:\s*false", cell.source, re.M):
                client.execute_cell(cell, i)
        client.set_widgets_metadata()
    nbformat.write(nb, path)
    return time.perf_counter() - t0


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        sys.exit(__doc__)
    for p in paths:
        print(f"{p}: {save_outputs(p):.0f} s")
    subprocess.run([str(Path(sys.executable).with_name("nbdev-clean"))], check=True)
