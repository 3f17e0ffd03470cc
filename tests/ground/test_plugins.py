"""A researcher's own terms, recipes and claims (issue 45): a plugin's fine-tune decided against recorded baselines
without retraining them (its parents retrained by seed, in worker processes that load the plugin), the extended
ledger written and read back, and every bad plugin refused in one line with nothing written."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


from hierbench.ledger import compare as C, records as R
from hierbench.ledger.compare import launch_compare
from hierbench.ledger.launchers import InProcess
from hierbench.plugins import PluginError, load_plugin

HIERBENCH = str(Path(sys.executable).parent / "hierbench")
PLUGIN = """
import hierbench
from hierbench.ledger.claims import Claim, register_claim

def spread(inputs):
    "The mean similarity between the batch's captions."
    t = inputs["captions"]
    return inputs["similarity"](t, t).mean()

hierbench.register_term("spread", spread)
hierbench.register_recipe(hierbench.get_recipe("clip-ft").replace(name="clip-ft-spread", weights={"spread": WEIGHT}))
register_claim(Claim("MINE-1", "me", "spreading captions helps", "clip-ft-spread", "clip-ft", "comp_acc",
                     differs_in=("weights.spread",)))
"""
KW = dict(log=lambda *a: None, progress=False, until_decided=True, max_seeds=3, round_seeds=1)


pytestmark = pytest.mark.usefixtures("isolated_registries")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    path = tmp_path_factory.mktemp("plugin") / "mine.py"
    path.write_text(PLUGIN.replace("WEIGHT", "0.1"))
    load_plugin(path)
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    "Ledger records of a smoke plan: clip, meru (HYP-1's row) and clip's plain fine-tune clip-ft."
    out = tmp_path_factory.mktemp("recorded")
    C.run_compare("smoke", seeds=2, out=out, recipes=["clip", "meru", "clip-ft"], launcher=InProcess(), **KW)
    return R.write_records(out, tmp_path_factory.mktemp("recs") / "ledger")


@pytest.fixture(scope="module")
def extended(plugin, recorded, tmp_path_factory):
    out = tmp_path_factory.mktemp("extended")
    res = launch_compare(
        None,
        seeds=2,
        out=out,
        recipes=["clip-ft-spread"],
        from_records=recorded,
        plugins=[str(plugin)],
        jobs=2,
        quiet=True,
        **KW,
    )  # two spawned workers: they load the plugin themselves
    return out, res


def test_a_plugin_fine_tune_is_decided_against_recorded_baselines_without_retraining_them(extended, recorded, plugin):
    out, res = extended
    weights = sorted(
        p.parent.relative_to(out / "runs").as_posix() for p in (out / "runs").glob("*/seed*/model.safetensors")
    )
    # the new recipe trained; the recorded baseline clip-ft never (its seed 2, which the records lack, is new);
    # the parents of seeds 0-1 retrained by seed, seed 2's trained as a new run
    assert weights == [
        "clip-ft-spread/seed0",
        "clip-ft-spread/seed1",
        "clip-ft-spread/seed2",
        "clip-ft/seed2",
        "clip/seed0",
        "clip/seed1",
        "clip/seed2",
    ], weights
    for s in (0, 1):
        row = json.loads((C.run_dir(out, "clip", s) / "eval.json").read_text())
        assert (
            "recorded" in row and row["retrained"]["weights_sha256"] and "zs_acc/general" in row["retrained"]["metrics"]
        )
        assert isinstance(row["retrained"]["same_weights"], bool)
    mine = json.loads((C.run_dir(out, "clip-ft-spread", 0) / "eval.json").read_text())
    assert mine["plugins"][0]["sha256"] and mine["plugins"][0]["recipes"] == [
        "clip-ft-spread"
    ]  # which file, which hash
    led = res["ledger"].set_index("id")
    assert led.loc["MINE-1", "n"] >= 2 and led.loc["MINE-1", "verdict"] in ("supported", "contradicted", "inconclusive")
    plan = json.loads((out / "plan.json").read_text())
    assert (
        plan["plugins"][0]["terms"] == ["spread"] and plan["until_decided"]["seeds_per_recipe"]["clip-ft-spread"] == 3
    )


def test_the_extended_ledger_is_written_and_read_back_with_its_plugin(extended, plugin, tmp_path):
    out, res = extended
    recs = R.write_records(out, tmp_path / "ext")
    assert (recs / "plugins" / "mine.py").read_text() == plugin.read_text()
    rec = R.read_records(recs)  # the plugin is loaded in this process
    doc = json.loads(json.dumps(R.ledger_from_records(rec)["document"]))
    assert R.ledger_differences(doc, rec.claims) == []
    assert any(c["id"] == "MINE-1" and c["n"] >= 2 for c in rec.claims["claims"])
    # without the plugin, in a fresh process: one line that says which plugin to pass
    bare = subprocess.run([HIERBENCH, "claims", str(recs)], capture_output=True, text=True, timeout=300)
    assert bare.returncode == 1 and bare.stderr.count("\n") == 1, bare.stderr
    # the records name the plugin by file name (no folder of one machine) and point at the copy they keep
    assert f"--plugin {plugin.name} (a copy of it is kept in {recs / 'plugins' / plugin.name})" in bare.stderr
    ok = subprocess.run(
        [HIERBENCH, "claims", str(recs), "--plugin", str(plugin)], capture_output=True, text=True, timeout=300
    )
    assert ok.returncode == 0 and "equal to" in ok.stdout, ok.stderr
    # an edited plugin is another definition of what ran: refused, naming it
    edited = tmp_path / "mine.py"
    edited.write_text(PLUGIN.replace("WEIGHT", "0.2"))
    shutil.copy(edited, plugin.with_name("edited.py"))
    other = subprocess.run(
        [HIERBENCH, "claims", str(recs), "--plugin", str(plugin.with_name("edited.py"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 1 and "was made with plugin" in other.stderr, other.stderr


def test_recorded_verdicts_are_kept_and_a_recorded_recipe_cannot_change(extended, recorded, tmp_path):
    out, res = extended
    fields = ("verdict", "effect", "ci_low", "ci_high", "n", "look")
    before = {
        (c["id"], c["a"], c["b"], c["metric"]): tuple(c[f] for f in fields)
        for c in json.loads((recorded / "claims.json").read_text())["claims"]
        if c["stopped"] in ("decided", "max seeds")
    }
    after = {
        (r.id, r.a, r.b, r.metric): tuple(json.loads(json.dumps(C.json_safe(getattr(r, f)))) for f in fields)
        for r in res["ledger"].itertuples()
    }
    assert before and all(after[k] == v for k, v in before.items()), (before, after)  # HYP-1 meru − clip, as recorded
    with pytest.raises(ValueError, match="another budget"):
        launch_compare("quick", seeds=2, out=tmp_path / "q", recipes=["clip-ft-spread"], from_records=recorded, **KW)


BAD = {
    "empty.py": ("x = 1\n", "registered nothing"),
    "broken.py": ("import no_such_module_anywhere\n", "failed to import: ModuleNotFoundError"),
    "shadow_term.py": (
        "import hierbench\nhierbench.register_term('align', lambda inputs: inputs['captions'].sum())\n",
        "term 'align' shadows a built-in term",
    ),
    "shadow_recipe.py": (
        "import hierbench\nhierbench.register_recipe(hierbench.get_recipe('degla').replace(weights={'igc': 0.5}))\n",
        "recipe 'degla' shadows a built-in recipe",
    ),
    "unknown_recipe.py": (
        "from hierbench.ledger.claims import Claim, register_claim\n"
        "register_claim(Claim('X', '', '', 'degla', 'clip-ftt', 'comp_acc'))\n",
        "unknown recipe 'clip-ftt'",
    ),
    "unknown_metric.py": (
        "from hierbench.ledger.claims import Claim, register_claim\nregister_claim(Claim('X', '', '', 'degla', "
        "'degla-base', 'comp_accuracy', differs_in=('ema_decay',)))\n",
        "unknown metric 'comp_accuracy'",
    ),
    "undeclared.py": (
        "from hierbench.ledger.claims import Claim, register_claim\n"
        "register_claim(Claim('X', '', '', 'degla', 'negclip', 'comp_acc', differs_in=('weights.igc',)))\n",
        "undeclared",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_plugin_is_refused_naming_it(name, tmp_path):
    src, message = BAD[name]
    (tmp_path / name).write_text(src)
    with pytest.raises(PluginError, match=f"plugin {tmp_path / name}") as err:
        load_plugin(tmp_path / name)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_on_the_command_line_a_bad_plugin_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "empty.py").write_text("x = 1\n")
    out = tmp_path / "out"
    res = subprocess.run(
        [HIERBENCH, "compare", "--budget", "smoke", "--plugin", str(tmp_path / "empty.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "registered nothing" in res.stderr, res.stderr
    assert res.stderr.startswith("hierbench compare: plugin") and not out.exists()


@pytest.mark.parametrize(
    "term,error,message",
    [
        ("inputs['captions'].sum(-1)", PluginError, "returned a tensor of shape (8,)"),
        ("inputs['captions'].sum() * float('nan')", FloatingPointError, "non-finite value at step 1: loss term 'odd'"),
    ],
)
def test_a_term_that_returns_no_scalar_or_nan_stops_training_naming_it(term, error, message, tmp_path):
    import hierbench
    from hierbench.recipes.recipe_run import train_recipe
    from hierbench.data.sources import WorldData

    hierbench.register_term("odd", eval(f"lambda inputs: {term}"))
    recipe = hierbench.get_recipe("clip").replace(name="clip-odd", weights={"odd": 1.0})
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        train_recipe(
            recipe, tmp_path / "run", WorldData(n_train=32), arch="world-debug", steps=2, batch_size=8, quiet=True
        )


def test_the_tutorials_plugin_file_registers_its_term_recipe_and_claim(isolated_registries):
    "Issue 55: the plugin the tutorial shows is a file beside it, and this is the file the tests load."
    from hierbench.ledger import claims
    from hierbench.plugins import load_plugin
    from hierbench.recipes import registry, terms

    path = Path(__file__).resolve().parents[2] / "nbs" / "tutorials" / "margin_plugin.py"
    load_plugin(path)
    assert (
        "margin" in terms.plugin_terms({"margin": 1.0}) and registry.get_recipe("degla-margin").weights["margin"] == 0.5
    )
    assert any(c.id == "MINE-1" and c.a == "degla-margin" for c in claims.CLAIMS)
