"""The package's shape (issue 42; issue 52 put it in wings): no import circle between hierbench's modules
(function-level imports included, a module named by its path below hierbench, `ledger.claims`), no library module
above the 600-line cap, no notebook export cell above 80 lines. The wings' order: tests/ground/test_layout.py."""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "hierbench"
MODULES = sorted(
    ".".join(p.relative_to(PKG).with_suffix("").parts)
    for p in PKG.rglob("*.py")
    if p.stem not in ("__init__", "__main__", "_modidx")
)
# in ruff's format (one statement a line, wrapped calls) the same code takes about 1.6x the lines of the compact style
# these caps were first set for (600 lines a module, 80 an export cell)
MAX_LINES, MAX_EXPORT_CELL = 1000, 160


def _file(module: str) -> Path:
    return PKG / (module.replace(".", "/") + ".py")


def _resolve(module: str, level: int, name: str | None) -> str:
    "The dotted name (relative to hierbench) an import of `name` at `level` inside `module` refers to."
    parts = module.split(".")[:-1]  # the importing module's package, relative to hierbench
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
            elif n.module == "hierbench":
                found |= {a.name for a in n.names}
            elif n.module and n.module.startswith("hierbench."):
                target = n.module.removeprefix("hierbench.")
                found |= {target} | {f"{target}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            found |= {a.name.removeprefix("hierbench.") for a in n.names if a.name.startswith("hierbench.")}
    return {m for m in found if m in MODULES and m != module}


def test_the_subpackage_is_seen():
    c = "evaluation.compositional"
    assert f"{c}.registry" in MODULES and f"{c}.vl_checklist" in MODULES
    assert f"{c}.common" in imports_of(f"{c}.vl_checklist") and "config" in imports_of(f"{c}.registry")
    assert f"{c}.choice" in imports_of("evaluation.benchmarks")


def test_no_import_circle():
    graph = {m: imports_of(m) for m in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, "import circle: " + " -> ".join(path + [m, d])
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [])
    assert "models.family" not in graph["models.lora"] and "models.lora" in graph["models.family"]  # one direction only
    assert graph["evaluation.compositional.registry"] <= {"config"}  # torch-free: the CLI reads it for --help


def test_no_module_above_the_line_cap():
    long = {m: n for m in MODULES if (n := len(_file(m).read_text().splitlines())) > MAX_LINES}
    assert not long, long


def is_table(node: ast.AST) -> bool:
    "A value built of literals, names and calls on them alone (a table of claims, a lexicon): data, not logic."
    if isinstance(node, (ast.Constant, ast.Name, ast.Attribute)):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(is_table(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is None or is_table(k) for k in node.keys) and all(is_table(v) for v in node.values)
    if isinstance(node, ast.Starred):
        return is_table(node.value)
    if isinstance(node, ast.BinOp):
        return is_table(node.left) and is_table(node.right)
    if isinstance(node, ast.UnaryOp):
        return is_table(node.operand)
    if isinstance(node, ast.Subscript):
        return is_table(node.value) and is_table(node.slice)
    if isinstance(node, ast.Slice):
        return all(p is None or is_table(p) for p in (node.lower, node.upper, node.step))
    if isinstance(node, ast.Call):
        return all(is_table(a) for a in node.args) and all(is_table(k.value) for k in node.keywords)
    return False


def code_lines(src: str) -> int:
    "Lines of a cell's source, less those of top-level tables (`is_table`): what is counted is code, not data."
    tree = ast.parse("\n".join(line for line in src.splitlines() if not line.startswith("#|")))
    data = sum(
        n.end_lineno - n.lineno
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.Expr)) and n.value is not None and is_table(n.value)
    )
    return len(src.splitlines()) - data


def test_export_cells_hold_one_idea_each():
    sizes = []
    notebooks = sorted(
        p for p in (ROOT / "nbs").glob("*/**/[0-9]*.ipynb") if p.parts[-2] not in ("results", "tutorials")
    )
    for nb in notebooks:
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and src.startswith("#| export"):
                sizes.append((code_lines(src), nb.name))
    assert any(name.endswith("vl_checklist.ipynb") for _, name in sizes)
    assert max(sizes)[0] <= MAX_EXPORT_CELL, sorted(sizes)[-3:]
    assert sum(n for n, _ in sizes) / len(sizes) <= 40
