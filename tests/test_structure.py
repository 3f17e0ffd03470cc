"""The package's shape (issue 42): no import circle between hierbench's modules (function-level imports included), no
library module above the 600-line cap, no notebook export cell above 80 lines."""
import ast, json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hierbench"
MODULES = sorted(p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "_modidx"))
MAX_LINES, MAX_EXPORT_CELL = 600, 80


def imports_of(module: str) -> set[str]:
    "The hierbench modules `module` imports anywhere in its file (top level or inside a function)."
    found = set()
    for n in ast.walk(ast.parse((PKG / f"{module}.py").read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1: found |= {n.module.split(".")[0]} if n.module else {a.name for a in n.names}
            elif n.module == "hierbench": found |= {a.name for a in n.names}
            elif n.module and n.module.startswith("hierbench."): found.add(n.module.split(".")[1])
        elif isinstance(n, ast.Import):
            found |= {a.name.split(".")[1] for a in n.names if a.name.startswith("hierbench.")}
    return {m for m in found if m in MODULES and m != module}


def test_no_import_circle():
    graph = {m: imports_of(m) for m in MODULES}
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, "import circle: " + " -> ".join(path + [m, d])
            if d not in state: visit(d, path + [m])
        state[m] = 2
    for m in MODULES:
        if m not in state: visit(m, [])
    assert "models" not in graph["lora"] and "lora" in graph["models"]   # one direction only


def test_no_module_above_the_line_cap():
    long = {m: n for m in MODULES if (n := len((PKG / f"{m}.py").read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_export_cells_hold_one_idea_each():
    sizes = []
    for nb in sorted((ROOT / "nbs").glob("[0-9]*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and src.startswith("#| export"): sizes.append((len(src.splitlines()), nb.name))
    assert max(sizes)[0] <= MAX_EXPORT_CELL, sorted(sizes)[-3:]
    assert sum(n for n, _ in sizes) / len(sizes) <= 25
