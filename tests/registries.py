"""Test helper: a test module that loads plugins (their terms, recipes, claims) leaves the registries as it found them,
so later tests in the same pytest process see the workbench's own rows only."""
import pytest


@pytest.fixture(scope="module", autouse=False)
def isolated_registries():
    from hierbench import claims, plugins, recipes, terms
    saved = (list(claims.CLAIMS), dict(recipes._RECIPES), dict(terms._PLUGIN_TERMS), dict(plugins._LOADED))
    yield
    claims.CLAIMS[:] = saved[0]
    recipes._RECIPES.clear(); recipes._RECIPES.update(saved[1])
    terms._PLUGIN_TERMS.clear(); terms._PLUGIN_TERMS.update(saved[2])
    plugins._LOADED.clear(); plugins._LOADED.update(saved[3])
