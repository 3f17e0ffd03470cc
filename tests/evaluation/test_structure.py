"""The package's shape (issue 42; issue 47 added the subpackage `hierbench.evaluation.compositional`): no import circle between
hierbench's modules (function-level imports included, subpackage modules as `compositional.NAME`), no library module
above the 600-line cap, no notebook export cell above 80 lines (the subpackage's notebooks under nbs/compositional/
included)."""
import ast, json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "hierbench"
SUBPACKAGES = ("compositional",)
MODULES = sorted([p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "_modidx")]
                 + [f"{s}.{p.stem}" for s in SUBPACKAGES for p in (PKG / s).glob("*.py") if p.stem != "__init__"])
MAX_LINES, MAX_EXPORT_CELL = 600, 80


def _file(module: str) -> Path: return PKG / (module.replace(".", "/") + ".py")


def _resolve(module: str, level: int, name: str | None) -> str:
    "The dotted name (relative to hierbench) an import of `name` at `level` inside `module` refers to."
    parts = module.split(".")[:-1]                     # the importing module's package, relative to hierbench
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(base + ([name] if name else []))


def imports_of(module: str) -> set[str]:
    "The hierbench modules `module` imports anywhere in its file (top level or inside a function)."
    found = set()
    for n in ast.walk(ast.parse(_file(module).read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                target = _resolve(module, n.level, n.module)
                found |= {target} | {f"{target}.{a.name}" if target else a.name for a in n.names}
            elif n.module == "hierbench": found |= {a.name for a in n.names}
            elif n.module and n.module.startswith("hierbench."):
                target = n.module.removeprefix("hierbench.")
                found |= {target} | {f"{target}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            found |= {a.name.removeprefix("hierbench.") for a in n.names if a.name.startswith("hierbench.")}
    return {m for m in found if m in MODULES and m != module}


def test_the_subpackage_is_seen():
    assert "compositional.registry" in MODULES and "compositional.vl_checklist" in MODULES
    assert "compositional.common" in imports_of("compositional.vl_checklist") and "config" in imports_of("compositional.registry")
    assert "compositional.choice" in imports_of("benchmarks")


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
    assert graph["compositional.registry"] <= {"config"}                 # torch-free: the CLI reads it for --help


def test_no_module_above_the_line_cap():
    long = {m: n for m in MODULES if (n := len(_file(m).read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_export_cells_hold_one_idea_each():
    sizes = []
    notebooks = sorted((ROOT / "nbs").glob("[0-9]*.ipynb")) + sorted(p for s in SUBPACKAGES for p in (ROOT / "nbs" / s).glob("[0-9]*.ipynb"))
    for nb in notebooks:
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and src.startswith("#| export"): sizes.append((len(src.splitlines()), nb.name))
    assert any(name.endswith("vl_checklist.ipynb") for _, name in sizes)
    assert max(sizes)[0] <= MAX_EXPORT_CELL, sorted(sizes)[-3:]
    assert sum(n for n, _ in sizes) / len(sizes) <= 25
