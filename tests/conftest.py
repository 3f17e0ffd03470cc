"""Fixtures shared by the test folders (one folder per wing of the package, `studies/` for the tools' studies).

The helper modules beside this file (`eval_models`, `hf_fixtures`) import by name: pyproject's
`[tool.pytest.ini_options] pythonpath` puts this folder on the path."""

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
