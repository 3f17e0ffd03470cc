"""Dense checks of the built-in world (hierbench.world.scenes): truth of every text, negatives, determinism, cache,
splits."""

import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hierbench.world import scenes as W
from hierbench.world.scenes import (
    COLOURS,
    NEGATIVE_TYPES,
    SHAPES,
    SIZES,
    RELATIONS,
    Clause,
    Meaning,
    NP,
    Obj,
    WorldConfig,
    audit_negatives,
    build_split,
    builtin_negatives,
    classify_negative,
    entails,
    heldout_combinations,
    holds,
    make_scene,
    parse,
    render,
    sloppy_negatives,
    true_texts,
)

CFG = WorldConfig()
N_SCENES = 2000


@pytest.fixture(scope="module")
def scenes():
    "2,000 scenes over all splits (most of them train)."
    per = {"train": 1200, "val": 200, "test-iid": 200, "test-comp": 200, "general": 200}
    return [make_scene(i, 0, CFG, sp) for sp, k in per.items() for i in range(k)]


# ---------------------------------------------------------------- taxonomy
def test_taxonomy_shape_requirements():
    assert len(SHAPES.leaves) >= 9 and len(SHAPES.children(SHAPES.root)) >= 3
    assert max(SHAPES.depth(n) for n in SHAPES.nodes) >= 2  # root -> super -> shape: three levels
    assert all(SHAPES.depth(l) == 2 for l in SHAPES.leaves)
    assert len(COLOURS.leaves) >= 6 and len(COLOURS.children(COLOURS.root)) >= 2
    assert set(W.COLOUR_RGB) == set(COLOURS.leaves)


def test_taxonomy_metric_properties():
    nodes = SHAPES.nodes
    for a, b in itertools.product(nodes, nodes):
        d = SHAPES.distance(a, b)
        assert d == SHAPES.distance(b, a) and (d == 0) == (a == b)
        for c in nodes:
            assert SHAPES.distance(a, c) <= d + SHAPES.distance(b, c)
    assert SHAPES.lca("circle", "ring") == "round" and SHAPES.lca("circle", "star") == "shape"
    with pytest.raises(KeyError, match="hexagon"):
        SHAPES.ancestors("hexagon")
    with pytest.raises(ValueError, match="twice"):
        W.Taxonomy.from_nested("t", {"a": ["x"], "b": ["x"]})


# ---------------------------------------------------------------- config
def test_config_validation_and_hash():
    assert CFG.config_hash() == WorldConfig().config_hash() and len(CFG.config_hash()) == 16
    assert CFG.config_hash() != WorldConfig(relation_margin=0.05).config_hash()
    assert CFG.config_hash() != WorldConfig(heldout_colour_shape=(("red", "star"),)).config_hash()
    for bad, field in [
        (dict(image_size=8), "image_size"),
        (dict(object_count_probs=(0.5, 0.5, 0.5)), "object_count_probs"),
        (dict(small_side=(0.3, 0.45)), "large_side"),
        (dict(relation_margin=0.4), "relation_margin"),
        (dict(heldout_colour_shape=(("pink", "circle"),)), "heldout_colour_shape"),
        (dict(heldout_relation_triples=(("circle", "near", "star"),)), "heldout_relation_triples"),
    ]:
        with pytest.raises(ValueError, match=field):
            WorldConfig(**bad)


# ---------------------------------------------------------------- language
meanings = st.builds(
    NP, st.sampled_from(SHAPES.nodes), st.sampled_from([None, *COLOURS.nodes[1:]]), st.sampled_from([None, *SIZES])
)
clauses = st.one_of(st.builds(Clause, meanings), st.builds(Clause, meanings, st.sampled_from(RELATIONS), meanings))


@settings(max_examples=300, deadline=None)
@given(st.lists(clauses, min_size=1, max_size=3), st.booleans(), st.booleans())
def test_render_parse_roundtrip(cls, exclusive, synonyms):
    m = Meaning(tuple(cls), exclusive)
    assert parse(render(m, synonyms=synonyms)) == m
    assert parse(render(m, synonyms=synonyms).upper() + ".") == m


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "circle",
        "a red",
        "a circle and",
        "a circle to the left of",
        "an circle",
        "a orange star",
        "a circle nothing else",
        "the red circle",
        "a red large circle",
        "a circle left a square",
        "circle red a large",
        "a circle and nothing else and a square",
        "a hexagon",
    ],
)
def test_holds_raises_outside_language(text):
    sc = make_scene(0)
    with pytest.raises(ValueError, match="outside the world's language") as e:
        holds(sc, text)
    assert repr(text) in str(e.value)
    with pytest.raises(ValueError):
        holds(sc, None)


def _hand_scene(objs):
    "A scene with given objects (texts empty): enough for holds/classify_negative."
    return W.Scene(0, 0, "train", CFG, np.zeros((32, 32, 3), np.uint8), objs, [], [], [], np.zeros(0), [], [], [])


def test_holds_semantics_by_hand():
    objs = [Obj("circle", "red", "large", (0, 0, 14, 14)), Obj("square", "blue", "small", (20, 20, 29, 29))]
    sc = _hand_scene(objs)
    true = [
        "a round shape",
        "a warm circle",
        "a large red circle to the left of a small blue square",
        "a small cool square below a big red shape",
        "a shape and a shape and nothing else",
        "a circle above a square",
        "a square under a circle",
        "a red circle and a blue square",
    ]
    false = [
        "a blue circle",
        "a small circle",
        "a circle right of a square",
        "a circle and nothing else",
        "a shape and a shape and a shape",
        "a circle to the left of a circle",
        "a symbol",
        "a cool circle",
    ]
    for t in true:
        assert holds(sc, t), t
    for t in false:
        assert not holds(sc, t), t
    # the margin: centres 7 and 24.5 px apart -> true up to a margin of 17.5 px
    assert holds(sc, "a circle left of a square", margin=17.4) and not holds(
        sc, "a circle left of a square", margin=17.6
    )


# ---------------------------------------------------------------- scenes
def test_scene_arrays(scenes):
    for s in scenes[::20]:
        assert s.image.dtype == np.uint8 and s.image.shape == (64, 64, 3)
        assert s.crops.dtype == np.uint8 and s.crops.shape == (len(s.objects), 64, 64, 3)
        assert len(s.phrases) == len(s.objects) == len(s.crops) and len(s.chain) == 4
        for o in s.objects:
            x0, y0, x1, y1 = o.box
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64 and all(isinstance(v, int) for v in o.box)
        for a, b in itertools.combinations(s.objects, 2):  # boxes disjoint
            assert a.box[2] <= b.box[0] or b.box[2] <= a.box[0] or a.box[3] <= b.box[1] or b.box[3] <= a.box[1]
    counts = np.bincount([len(s.objects) for s in scenes if s.split == "train"], minlength=4)
    assert counts[0] == 0 and all(counts[1:] > 100)
    assert all(len(s.objects) == 1 for s in scenes if s.split == "general")


def test_sizes_and_relations_unambiguous(scenes):
    m = CFG.margin_px
    sides = {"small": set(), "large": set()}
    for s in scenes:
        for o in s.objects:
            sides[o.size].add(o.box[2] - o.box[0])
        for r in s.relations:
            (ax, ay), (bx, by) = s.objects[r.subject].centre, s.objects[r.object].centre
            off = {"left": bx - ax, "right": ax - bx, "above": by - ay, "below": ay - by}[r.relation]
            assert off > m
        for i, j in itertools.permutations(range(len(s.objects)), 2):  # every pair has a stated relation
            assert any(r.subject == i and r.object == j for r in s.relations)
    assert max(sides["small"]) < min(sides["large"])


def test_every_true_text_holds(scenes):
    for s in scenes:
        for t in true_texts(s):
            assert holds(s, t), (s.split, s.index, t)
        assert s.chain[2] in s.phrases


def test_every_negative_is_false_and_typed(scenes):
    seen = set()
    for s in scenes:
        truths = set(true_texts(s))
        types = [n.type for n in s.negatives]
        assert len({n.text for n in s.negatives}) == len(s.negatives)
        assert set(types) <= set(NEGATIVE_TYPES) and max(types.count(t) for t in types) <= s.config.negatives_per_type
        for n in s.negatives:
            assert not holds(s, n.text), (s.index, n)
            assert not holds(s, n.text, margin=0.0), (s.index, n)  # not even leniently true
            assert n.text not in truths
            seen.add(n.type)
        if len(s.objects) == 1:  # swaps, relations and reshuffles need two phrases
            assert set(types) == {"replace_obj", "replace_att", "add_obj", "add_att"}, (s.index, s.negatives)
        else:  # a type gives up only when all its candidates are true (e.g. swapping two circles)
            assert {"replace_obj", "replace_att", "add_obj", "add_att"} <= set(types), (s.index, s.negatives)
    assert seen == set(NEGATIVE_TYPES)
    multi = [s for s in scenes if len(s.objects) >= 2]
    # (types also skip candidates that would name a held-out combination outside test-comp)
    assert np.mean([len(s.negatives) >= 6 for s in multi]) > 0.9 and np.mean([len(s.negatives) for s in multi]) > 7


def test_rejections_are_counted(scenes):
    tot = {}
    for s in scenes:
        for k, v in s.rejected.items():
            tot[k] = tot.get(k, 0) + v
    # swap_obj of two same-shape phrases and add_obj naming the unmentioned third object are true: they must be
    # caught and counted
    assert tot.get("swap_obj", 0) > 0 and tot.get("add_obj", 0) > 0 and sum(tot.values()) > 50


def test_chain_is_general_to_specific(scenes):
    for s in scenes:
        for k in range(3):
            assert entails(s.chain[k + 1], s.chain[k]), (s.index, s.chain)
            assert not entails(s.chain[k], s.chain[k + 1]), (s.index, s.chain)
        # semantic check on scenes: wherever level k+1 holds, level k holds (try this scene's chain elsewhere)
        other = scenes[(s.index * 7 + 3) % len(scenes)]
        for k in range(3):
            if holds(other, s.chain[k + 1]):
                assert holds(other, s.chain[k])
    heads = [parse(s.chain[0]).clauses[0].np.head for s in scenes]
    assert set(heads) == set(SHAPES.children(SHAPES.root))


def test_paraphrases_have_the_same_meaning(scenes):
    for s in scenes:
        assert s.paraphrases
        for p in s.paraphrases:
            assert p != s.chain[3]
            assert entails(p, s.chain[3]) and entails(s.chain[3], p), (s.chain[3], p)
        for a in s.alternatives:  # alternatives: true but not a restatement of the top caption
            assert not (entails(a, s.chain[3]) and entails(s.chain[3], a)), (s.chain[3], a)


def test_determinism_in_process():
    a, b = make_scene(17, seed=3), make_scene(17, seed=3)
    assert a.image.tobytes() == b.image.tobytes() and a.crops.tobytes() == b.crops.tobytes()
    assert (a.chain, a.negatives, a.alternatives) == (b.chain, b.negatives, b.alternatives)
    assert make_scene(17, seed=4).image.tobytes() != a.image.tobytes()
    assert make_scene(17, seed=3, split="val").image.tobytes() != a.image.tobytes()


def _digest(n=30, seed=5):
    h = hashlib.sha256()
    for i in range(n):
        s = make_scene(i, seed, split="test-comp" if i % 2 else "train")
        h.update(s.image.tobytes())
        h.update(s.crops.tobytes())
        h.update(json.dumps([s.chain, s.paraphrases, s.alternatives, s.negatives]).encode())
    return h.hexdigest()


def test_determinism_across_processes():
    code = (
        "import sys; sys.path.insert(0, %r); import test_world as t; "
        "from hierbench.world.scenes import WorldConfig; print(t._digest(), WorldConfig().config_hash())"
        % str(Path(__file__).parent)
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # a different string-hash salt must not matter
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == [_digest(), CFG.config_hash()]


# ---------------------------------------------------------------- splits
def test_heldout_combinations_never_in_train_like_splits(scenes):
    for s in scenes:
        found = heldout_combinations(s.objects, CFG, margin=0.0)
        if s.split == "test-comp":
            strict = heldout_combinations(s.objects, CFG, margin=CFG.margin_px)
            assert strict, (s.index, s.objects)
        else:
            assert not found, (s.split, s.index, found)
    comp = [s for s in scenes if s.split == "test-comp"]
    kinds = {k[0] for s in comp for k in heldout_combinations(s.objects, CFG, CFG.margin_px)}
    assert kinds == {"colour-shape", "triple"}


def test_no_training_text_names_a_heldout_combination(scenes):
    "Not even negatives: a model must not learn held-out captions as 'always wrong'."
    for s in scenes:
        texts = true_texts(s) + [n.text for n in s.negatives]
        named = [t for t in texts if W.mentions_heldout(parse(t), CFG)]
        if s.split != "test-comp":
            assert not named, (s.split, s.index, named)
    assert W.mentions_heldout(parse("a large red square"), CFG)
    assert W.mentions_heldout(parse("a square to the right of a circle"), CFG)  # = circle left of square
    assert not W.mentions_heldout(parse("a square to the left of a circle"), CFG)


def test_bad_index():
    for bad in (-1, 1.5, "3"):
        with pytest.raises(ValueError, match="index"):
            make_scene(bad)


def test_distance_matrix():
    d = SHAPES.distance_matrix()
    assert d.shape == (9, 9) and (d == d.T).all() and (np.diag(d) == 0).all()
    assert set(d[np.triu_indices(9, 1)].tolist()) == {2, 4}


def test_testcomp_caption_states_the_heldout_combination(scenes):
    triples = {W._canonical_triple(*t) for t in CFG.heldout_relation_triples}
    for s in (s for s in scenes if s.split == "test-comp"):
        m = parse(s.chain[3])
        c = m.clauses[0]
        pairs = {(n.colour, n.head) for n in m.nps}
        rel = c.relation and W._canonical_triple(c.np.head, c.relation, c.other.head)
        assert pairs & set(CFG.heldout_colour_shape) or rel in triples, s.chain[3]


def test_unknown_split():
    with pytest.raises(ValueError, match="test-ood"):
        make_scene(0, split="test-ood")
    with pytest.raises(ValueError, match="test-ood"):
        build_split("test-ood", 3, cache_dir=False)


# ---------------------------------------------------------------- cache
def test_cache_keyed_by_config(tmp_path):
    a = build_split("train", 40, cache_dir=tmp_path)
    assert a.path.is_dir() and a.images.shape == (40, 64, 64, 3)
    assert len(a.crops) == a.crop_offsets[-1] == sum(len(m["objects"]) for m in a.meta)
    mtime = (a.path / "images.npy").stat().st_mtime_ns
    b = build_split("train", 40, cache_dir=tmp_path)  # reload: same folder, untouched
    assert b.path == a.path and (b.path / "images.npy").stat().st_mtime_ns == mtime
    assert b.images.tobytes() == a.images.tobytes() and b.meta == a.meta
    c = build_split("train", 40, config=WorldConfig(image_size=48), cache_dir=tmp_path)  # new config: rebuilt
    assert c.path != a.path and c.images.shape == (40, 48, 48, 3)
    assert build_split("train", 40, seed=1, cache_dir=tmp_path).path != a.path
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no half-written folders left
    # arrays and texts agree with make_scene, object for object
    for i in (0, 13, 39):
        s, r = make_scene(i), a.scene(i)
        assert s.image.tobytes() == r.image.tobytes() and s.crops.tobytes() == r.crops.tobytes()
        assert s.objects == r.objects and s.negatives == r.negatives and true_texts(s) == a.true_texts(i)
        assert all(holds(r, t) for t in true_texts(r))
    lab = a.object_labels()
    assert all(len(v) == len(a.crops) for v in lab.values())
    objs = [o for i in range(len(a)) for o in a.objects(i)]
    assert [SHAPES.leaves[k] for k in lab["shape"]] == [o.shape for o in objs]
    assert [COLOURS.leaves[k] for k in lab["colour"]] == [o.colour for o in objs]
    assert [tuple(b) for b in lab["box"].tolist()] == [o.box for o in objs] and (np.diff(lab["scene"]) >= 0).all()
    # a cache entry whose config hash does not match is refused, naming the file
    meta = json.loads((a.path / "meta.json").read_text())
    meta["config_hash"] = "0" * 16
    (a.path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="meta.json"):
        build_split("train", 40, cache_dir=tmp_path)
    d = build_split("train", 40, cache_dir=tmp_path, rebuild=True)
    assert d.images.tobytes() == a.images.tobytes()
    assert build_split("train", 40, cache_dir=tmp_path).meta == a.meta  # the rebuilt entry reloads


def test_parallel_build_equals_serial():
    serial = build_split("general", 24, cache_dir=False, workers=1)
    par = build_split("general", 24, cache_dir=False, workers=2)
    assert serial.images.tobytes() == par.images.tobytes() and serial.meta == par.meta


# ---------------------------------------------------------------- audit
def test_audit_builtin_vs_sloppy(scenes):
    sample = scenes[::7]
    good = audit_negatives(sample, builtin_negatives)
    assert good.loc["total", "hard_positive"] == 0 and good.loc["total", "n"] == sum(len(s.negatives) for s in sample)
    assert good.loc["total", "valid_hard"] > 0.8  # single edits by construction; reshuffles may be several
    bad = audit_negatives(sample, sloppy_negatives)
    assert bad.loc["replace_att", "hard_positive"] > 0.05
    assert bad.loc["reshuffle", "easy"] > 0.9  # word salad is outside the language
    np.testing.assert_allclose(bad[["valid_hard", "easy", "hard_positive"]].sum(axis=1), 1.0)


def test_classify_negative_by_hand():
    s = _hand_scene(
        [Obj("heart", "orange", "small", (2, 12, 11, 21)), Obj("circle", "purple", "large", (16, 8, 30, 22))]
    )
    assert classify_negative(s, "a small orange heart to the left of a large purple circle") == "hard_positive"
    assert classify_negative(s, "a big orange heart to the left of a large purple circle") == "valid_hard"
    assert classify_negative(s, "a large purple circle to the left of a small orange heart") == "valid_hard"
    assert classify_negative(s, "a large green star to the right of a small blue square") == "easy"
    assert classify_negative(s, "heart orange a small") == "easy"


def test_check_negative_types_names_what_is_wrong():
    assert W.check_negative_types(["swap_obj", "reshuffle"]) == ("swap_obj", "reshuffle")
    with pytest.raises(ValueError, match="unknown.*'swap'"):
        W.check_negative_types(["swap", "swap_att"])
    with pytest.raises(ValueError, match="empty"):
        W.check_negative_types([])


# The generator's output for (seed 0, scenes 0-39 of train and test-iid) at this WORLD_VERSION. Split caches are keyed
# by
# WORLD_VERSION, so a change to rendering or text generation without a bump silently reuses stale caches (it happened:
# version 2's caches outlived a change of the add_att / reshuffle draws). If this fails after an intended change, bump
# WORLD_VERSION in 02_world and record the new digest here.
WORLD_DIGEST = {3: "dc34886903133c5500909409543c541d7524e2cd330234082fea11a6543662a3"}


def test_world_output_is_pinned_to_its_version():
    import hashlib
    from hierbench.world.scenes import WORLD_VERSION, make_scene

    h = hashlib.sha256()
    for split in ("train", "test-iid"):
        for i in range(40):
            s = make_scene(i, 0, None, split)
            h.update(s.image.tobytes())
            h.update(
                json.dumps(
                    [s.chain, s.phrases, s.paraphrases, s.alternatives, [list(n) for n in s.negatives], s.rejected],
                    default=str,
                ).encode()
            )
    assert WORLD_VERSION in WORLD_DIGEST, f"record the digest of WORLD_VERSION {WORLD_VERSION}: {h.hexdigest()}"
    assert h.hexdigest() == WORLD_DIGEST[WORLD_VERSION], (
        "the world's scenes changed without a WORLD_VERSION bump: stale split caches would be reused; bump it"
    )


# ---------------------------------------------------------------- the mirror of a scene
def test_mirror_text_swaps_left_and_right_only():
    t = "a large red circle to the left of a small blue square and a star right of a ring"
    m = W.mirror_text(t)
    assert m == "a large red circle to the right of a small blue square and a star left of a ring"
    assert W.mirror_text(m) == t
    assert W.mirror_text("a heart above a cross") == "a heart above a cross"


def test_a_mirrored_scene_is_a_scene_of_the_world(scenes):
    "Every text true of a scene holds, mirrored, of its mirror; every negative stays false, even leniently."
    flip = {"left": "right", "right": "left"}
    changed = 0
    for sc in scenes[:600]:
        mi = W.mirror_scene(sc)
        assert mi.image.shape == sc.image.shape and np.array_equal(mi.image, sc.image[:, ::-1])
        assert np.array_equal(mi.crops, sc.crops[:, :, ::-1])
        assert sorted(mi.relations) == sorted(
            W.Relation(r.subject, flip.get(r.relation, r.relation), r.object) for r in sc.relations
        )
        for t in true_texts(sc):
            assert holds(mi, W.mirror_text(t)), (sc.index, t)
        for n in mi.negatives:
            assert not holds(mi, n.text, margin=0.0), (sc.index, n)
        changed += any(not holds(mi, t) for t in true_texts(sc))  # a horizontal relation makes the mirror differ
        back = W.mirror_scene(mi)
        assert back.objects == sc.objects and np.array_equal(back.image, sc.image) and back.chain == sc.chain
    assert changed > 200  # most multi-object scenes state a horizontal relation that the mirror falsifies
