"""The front door: `import hierbench` exposes the names a user needs, lazily (no torch at import)."""

import subprocess
import sys

import pytest

import hierbench


def test_every_front_door_name_resolves():
    missing = []
    for name in hierbench.__all__:
        try:
            obj = getattr(hierbench, name)
        except (AttributeError, ImportError) as e:
            missing.append(f"{name}: {e!r}")
            continue
        if not callable(obj):
            missing.append(f"{name}: not callable ({type(obj).__name__})")
        elif getattr(obj, "__module__", None) != hierbench._FRONT_DOOR[name]:
            missing.append(f"{name}: defined in {obj.__module__}, mapped to {hierbench._FRONT_DOOR[name]}")
    assert not missing, "\n".join(missing)


def test_front_door_lists_the_ten_names_of_the_issue():
    want = {
        "create_model",
        "load_model",
        "get_recipe",
        "list_recipes",
        "train_recipe",
        "evaluate_world",
        "evaluate_benchmarks",
        "exp_map0",
        "dist",
        "holds",
    }
    assert want <= set(hierbench.__all__)
    assert set(hierbench.__all__) <= set(dir(hierbench))


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        hierbench.no_such_name
    assert not hasattr(hierbench, "no_such_name")


def test_import_hierbench_does_not_import_torch():
    code = "import sys, hierbench; print(hierbench.__version__); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, torch_loaded = out.stdout.split()
    assert version == hierbench.__version__ and torch_loaded == "False", out.stdout


def test_a_front_door_name_loads_its_module_on_first_use():
    code = (
        "import sys, hierbench; assert 'hierbench.recipes.registry' not in sys.modules; "
        "names = hierbench.list_recipes(); assert 'clip' in names and 'hierbench.recipes.registry' in sys.modules; "
        "assert hierbench.list_recipes is sys.modules['hierbench.recipes.registry'].list_recipes; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


_IMPORT_NAME = {"umap-learn": "umap", "jupyter-server-mathjax": "jupyter_server_mathjax"}


def _extras_import_names() -> set[str]:
    import re
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    names = set()
    for extra in ("lab", "docs", "t5", "track", "lora", "onnx", "parquet", "view"):
        for req in meta["optional-dependencies"][extra]:
            dist = re.match(r"[A-Za-z0-9_.-]+", req)[0]
            names.add(_IMPORT_NAME.get(dist, dist.replace("-", "_")))
    return names


def test_notebook_tools_are_extras_not_core():
    import re
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    core = {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower() for r in meta["dependencies"]}
    assert not core & {
        "jupyterlab",
        "ipywidgets",
        "umap-learn",
        "geoopt",
        "nbdev",
        "nbconvert",
        "jupyter-server-mathjax",
        "kaleido",
    }
    assert {"hierbench[lab,docs,t5,track,lora,onnx,parquet]", "pytest"} <= set(
        meta["optional-dependencies"]["dev"]
    )  # the README's install
    # [view] (HyperView) stays out of [dev]: it pins numpy<2.4 and huggingface-hub<2.0 (ARCHITECTURE.md, CI's .venv-
    # view)
    assert not any("view" in r for r in meta["optional-dependencies"]["dev"]) and meta["optional-dependencies"]["view"][
        0
    ].startswith("hyperview")
    assert set(meta["optional-dependencies"]["track"]) == {"tensorboard", "wandb"} and meta["optional-dependencies"][
        "lora"
    ][0].startswith("peft")


def test_every_module_imports_without_the_extras(tmp_path):
    """A core install (no [lab], [docs], [t5], [track], [lora], [parquet], ...): every library module — the subpackage's
    too — still imports; the extras' packages are stubbed out."""
    for name in _extras_import_names():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError('{name} (a core install)', name='{name}')"
        )
    code = (
        "import importlib, pkgutil, hierbench; bad = []\n"
        "for m in pkgutil.walk_packages(hierbench.__path__, 'hierbench.'):\n"
        "    if m.name.endswith('__main__'): continue   # `python -m hierbench.cli` runs the command\n"
        "    try: importlib.import_module(m.name)\n"
        "    except Exception as e: bad.append(f'{m.name}: {e!r}')\n"
        "print(bad)"
    )
    import os

    env = dict(
        os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]


def test_reading_records_imports_no_model_library():
    """The ledger's readers (records, claims, explain) and the CLI's commands import no open_clip (with torchvision,
    timm and transformers, about 4 s of a 2-core machine) and no scikit-learn: a verdict's page from records stays
    within seconds. They are imported where a tower is built or a metric needs them."""
    code = (
        "import sys; import hierbench.ledger.explain, hierbench.ledger.records, hierbench.cli.commands; "
        "print(sorted(m for m in ('open_clip', 'torchvision', 'timm', 'transformers', 'sklearn.linear_model') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
    code = "import sys; from hierbench.models.family import create_model; create_model('world-debug'); " + (
        "print('open_clip' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]  # built where a model is made
