"""Fixtures shared by the test folders (one folder per wing of the package, `studies/` for the tools' studies).

The helper modules beside this file (`eval_models`, `hf_fixtures`) import by name: pyproject's
`[tool.pytest.ini_options] pythonpath` puts this folder on the path."""

import ast
import functools
import inspect
import os
import re
import sys

import pytest


@pytest.fixture(scope="module", autouse=False)
def isolated_registries():
    """A test module that loads plugins (their terms, recipes, claims) leaves the registries as it found them, so
    later tests in the same pytest process see the workbench's own rows only."""
    from hierbench import plugins
    from hierbench.ledger import claims
    from hierbench.recipes import registry as recipes
    from hierbench.recipes import terms

    saved = (list(claims.CLAIMS), dict(recipes._RECIPES), dict(terms._PLUGIN_TERMS), dict(plugins._LOADED))
    yield
    claims.CLAIMS[:] = saved[0]
    recipes._RECIPES.clear()
    recipes._RECIPES.update(saved[1])
    terms._PLUGIN_TERMS.clear()
    terms._PLUGIN_TERMS.update(saved[2])
    plugins._LOADED.clear()
    plugins._LOADED.update(saved[3])


_SHARED_WORDS = re.compile(r"SHARED|\.\./shared|[\"']shared[\"']|shared/data")


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=None)
def _shared_names(module_name: str) -> frozenset:
    """The module-level names of a module that lead to ../shared: a constant or function whose code names it, or
    names another such name (closed over the module)."""
    module = sys.modules.get(module_name)
    text = _source(module)
    if not text:
        return frozenset()
    parts = {}
    for node in ast.parse(text).body:
        seg = ast.get_source_segment(text, node) or ""
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            parts[node.name] = seg
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    parts[t.id] = seg
    found = {n for n, seg in parts.items() if _SHARED_WORDS.search(seg)}
    while True:
        more = {n for n, seg in parts.items() if n not in found and any(re.search(rf"\b{f}\b", seg) for f in found)}
        if not more:
            return frozenset(found)
        found |= more


def _leads_to_shared(fn) -> bool:
    "Whether a function's code names ../shared or a name of its module that leads there."
    text = _source(fn)
    names = _shared_names(getattr(fn, "__module__", "") or "")
    return bool(_SHARED_WORDS.search(text)) or any(re.search(rf"\b{n}\b", text) for n in names)


def _reads_shared(item) -> bool:
    "Whether a test may read ../shared: its code, a fixture it uses (at any depth) or a marker's reason leads there."
    fixtures = [fd.func for defs in item._fixtureinfo.name2fixturedefs.values() for fd in defs]
    reasons = " ".join(str(m.kwargs.get("reason", "")) + " ".join(map(str, m.args)) for m in item.iter_markers())
    fn = getattr(item, "function", None)
    return bool(_SHARED_WORDS.search(reasons)) or any(_leads_to_shared(f) for f in [fn, *fixtures] if f is not None)


def pytest_collection_modifyitems(config, items):
    """`HIERBENCH_SHARED_ONLY=1` (tools/run_tests_without_shared.sh): keep only the tests that may read ../shared; the
    others ran in the main suite, and a missing ../shared changes nothing they do."""
    if not os.environ.get("HIERBENCH_SHARED_ONLY"):
        return
    reads = [_reads_shared(i) for i in items]
    config.hook.pytest_deselected(items=[i for i, r in zip(items, reads) if not r])
    items[:] = [i for i, r in zip(items, reads) if r]
