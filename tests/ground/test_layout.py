"""The package's layout (hierbench.layout): wings import only the ground floor and earlier wings, no module imports
another's underscore names, notebooks import only earlier notebooks, the sidebar follows the wings, and module paths
from before the wings still import (with one warning)."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from hierbench.layout import GROUND_FLOOR, MOVED, WINGS, wing_rank

ROOT = Path(__file__).resolve().parents[2]
PKG, NBS = ROOT / "hierbench", ROOT / "nbs"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES = {module_name(p): p for p in PKG.rglob("*.py") if p.name != "_modidx.py"}


def imported(tree: ast.AST, package: str):
    """(module, name, line) for every import in `tree` (module level or inside functions); `name` is the imported
    attribute of `from M import name`, None for `import M`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else base), alias.name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno


def package_imports():
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module, attr, line in imported(ast.parse(path.read_text()), package):
            if module in MODULES and module != name:
                yield name, module, attr, line


def test_every_module_sits_on_the_ground_floor_or_in_a_wing():
    top = {p.stem for p in PKG.glob("*.py") if p.stem not in ("__init__", "_modidx")}
    assert top == set(GROUND_FLOOR)
    assert {p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith("__")} == set(WINGS)


def test_no_wing_imports_a_later_wing():
    late = [
        f"{name}:{line} imports {module}"
        for name, module, _, line in package_imports()
        if wing_rank(module) > wing_rank(name)
    ]
    assert not late, "\n".join(late)


def test_no_module_imports_another_modules_underscore_names():
    private = [
        f"{name}:{line} imports {module}.{attr}"
        for name, module, attr, line in package_imports()
        if attr and attr.startswith("_") and not attr.startswith("__")
    ]
    assert not private, "\n".join(private)


def notebook_key(rel: Path) -> tuple:
    "(wing rank, the numbers of its folders and file) of a library notebook: the order it may import in."
    numbers = tuple(int(m.group(1)) for part in rel.parts if (m := re.match(r"(\d+)_", part)))
    return (["ground", *WINGS].index(rel.parts[0]),) + numbers


def library_notebooks() -> dict[str, Path]:
    "module -> the notebook that exports it, for every notebook in a wing folder."
    out = {}
    for nb in NBS.glob("*/**/*.ipynb"):
        rel = nb.relative_to(NBS)
        if rel.parts[0] not in ("ground", *WINGS):
            continue
        m = re.search(r"#\| default_exp (\S+?)(\\n|\")", nb.read_text())
        assert m, f"{rel} exports no module"
        out["hierbench." + m.group(1).removesuffix(".__init__")] = rel
    return out


def test_notebooks_sit_in_their_wing_folder():
    for module, rel in library_notebooks().items():
        wing = "ground" if module.count(".") == 1 and module.split(".")[1] not in WINGS else module.split(".")[1]
        assert rel.parts[0] == wing, f"{rel} exports {module}"


def test_no_notebook_imports_a_later_notebook():
    by_module = library_notebooks()
    late = []
    for module, rel in by_module.items():
        cells = json.loads((NBS / rel).read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
        package = module if (NBS / rel).stem.endswith("front_door") else module.rpartition(".")[0]
        for target, attr, _ in imported(ast.parse(code), package):
            if not target.startswith("hierbench"):
                continue
            if target not in by_module and attr is not None and f"{target}.{attr}" in by_module:
                target = f"{target}.{attr}"
            source = by_module.get(target)
            if source is not None and notebook_key(source) > notebook_key(rel):
                late.append(f"{rel} imports {target} ({source})")
    assert not late, "\n".join(late)


def test_the_sidebar_has_one_section_per_wing_in_order():
    sidebar = yaml.safe_load((NBS / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    sections = [s for s in sidebar if isinstance(s, dict)]
    wings = []
    for section in sections:
        folders = {Path(f).parts[0] for f in section["contents"] if "/" in f}
        wings += sorted(folders & {"ground", *WINGS})
    assert wings == ["ground", *WINGS]
    listed = {f for s in sections for f in s["contents"]}
    assert {str(p.relative_to(NBS)) for p in NBS.glob("*/**/*.ipynb")} <= listed | set()


OLD_PATHS = ["claims", "compare", "compositional.sugarcrepe", "winoground"]


def test_an_old_module_path_warns_once_and_is_the_same_module():
    "In a fresh interpreter (nothing imported yet), each old path imported twice: one warning each, the new module."
    code = (
        "import importlib, warnings\n"
        "counts = []\n"
        f"for old in {OLD_PATHS!r}:\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        a = importlib.import_module('hierbench.' + old)\n"
        "        b = importlib.import_module('hierbench.' + old)\n"
        "    new = importlib.import_module('hierbench.layout').moved_to('hierbench.' + old)\n"
        "    assert a is b is importlib.import_module(new), (a, new)\n"
        "    counts.append(len([x for x in w if 'moved to' in str(x.message)]))\n"
        "print(counts)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([1] * len(OLD_PATHS))


def test_every_old_path_resolves():
    import importlib

    for old, new in MOVED.items():
        assert importlib.import_module(f"hierbench.{new}")
    assert set(MOVED.values()) <= {m.removeprefix("hierbench.") for m in MODULES}


def test_old_wing_names_answer_the_old_modules_names():
    import hierbench.data
    import hierbench.models
    import hierbench.recipes
    import hierbench.world

    assert hierbench.recipes.get_recipe("clip").name == "clip"
    assert callable(hierbench.recipes.register_recipe) and callable(hierbench.world.make_scene)
    assert hierbench.models.DualEncoder is hierbench.models.dual_encoder.DualEncoder
    assert callable(hierbench.data.collate_batch)
