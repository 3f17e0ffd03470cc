"""Dense checks for hierbench.data.negatives: every returned negative is valid, rules do what they say, LLM output is
checked."""

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from hierbench.data.negatives import (
    ALL_RULES,
    DEGLA_RULES,
    NEGCLIP_RULES,
    ORDER_RULES,
    LEXICON,
    LexiconTagger,
    Negative,
    build_prompt,
    default_tagger,
    is_changed,
    make_negatives,
    normalize_text,
    parse_llm_output,
    pluralize,
    rewrite,
    rule_consistent,
    spacy_tagger,
    tokenize,
    PROMPTS,
)

NOUNS = ["dog", "cat", "man", "woman", "bus", "table", "pizza", "horse", "dogs", "men", "kite", "hydrant"]
ADJS = ["red", "blue", "small", "large", "wooden", "old", "young", "shiny"]
PREPS = ["on", "under", "next to", "near", "behind", "with"]
VERBS = ["sitting", "holding", "riding", "looking at"]


@st.composite
def captions(draw):
    "COCO-like captions: [det] [adj] noun (verb|prep) [det] [adj] noun ... with optional punctuation and case."
    parts = []
    for k in range(draw(st.integers(1, 4))):
        if k:
            parts.append(draw(st.sampled_from(PREPS + VERBS + ["and"])))
        parts.append(draw(st.sampled_from(["a", "the", "two", ""])))
        parts += draw(st.lists(st.sampled_from(ADJS), max_size=2))
        parts.append(draw(st.sampled_from(NOUNS)))
    text = " ".join(p for p in parts if p)
    if draw(st.booleans()):
        text = text[0].upper() + text[1:]
    return text + draw(st.sampled_from(["", ".", " .", "!"]))


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(captions(), st.sampled_from(ALL_RULES), st.integers(0, 10**6))
def test_every_returned_rewrite_is_changed_and_consistent(cap, rule, seed):
    out = rewrite(cap, rule, rng=seed)
    if out is None:
        return
    assert isinstance(out, str) and out.strip()
    assert is_changed(cap, out), (cap, out)
    assert rule_consistent(cap, out, rule), (rule, cap, out)


@FAST
@given(captions(), st.integers(0, 10**6), st.integers(0, 8))
def test_make_negatives_distinct_valid_and_bounded(cap, seed, k):
    rej = Counter()
    negs = make_negatives(cap, DEGLA_RULES + NEGCLIP_RULES, k=k, rng=seed, rejections=rej)
    assert len(negs) <= k
    norms = [normalize_text(n.text) for n in negs]
    assert len(set(norms)) == len(norms) and normalize_text(cap) not in norms
    assert all(isinstance(n, Negative) and n.source == "rules" and n.rule in ALL_RULES for n in negs)
    assert set(rej) <= {"not_applicable", "unchanged", "duplicate"}


@FAST
@given(captions(), st.integers(0, 1000))
def test_deterministic_given_seed_and_by_default(cap, seed):
    assert make_negatives(cap, rng=seed) == make_negatives(cap, rng=seed)
    assert make_negatives(cap) == make_negatives(cap)


def test_swaps_exchange_exactly_two_words_and_keep_the_rest():
    cap = "A black cat sitting on a red chair near the window."
    out = rewrite(cap, "swap_nouns", rng=3)
    a, b = tokenize(cap), tokenize(out)
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert len(a) == len(b) and len(diff) == 2 and Counter(a) == Counter(b)
    out = rewrite(cap, "swap_adjectives", rng=0)
    assert out == "A red cat sitting on a black chair near the window."


def test_replacements_stay_in_group_and_are_not_synonyms():
    for seed in range(30):
        out = rewrite("A big dog on the grass.", "replace_adjectives", rng=seed)
        assert out is not None
        new = [w for w in normalize_text(out).split() if w not in normalize_text("A big dog on the grass.").split()]
        assert len(new) == 1 and new[0] in ("small", "little", "tiny"), out  # size -> opposite size only
        out = rewrite("Two dogs on a bed.", "replace_nouns", rng=seed)
        new = [w for w in normalize_text(out).split() if w not in ("two", "dogs", "on", "a", "bed")]
        assert len(new) == 1, out
        e = LEXICON[new[0]]
        assert e.pos == "NOUN"
        # number is kept: dogs (plural animal) -> plural animal, or bed (furniture) -> singular furniture
        assert (e.group == "animal" and pluralize(e.lemma) == new[0]) or (e.group, e.plural) == ("furniture", False), (
            out
        )


def test_articles_are_fixed_and_capitals_follow_the_slot():
    assert rewrite("An apple next to a dog.", "swap_nouns") == "A dog next to an apple."
    out = rewrite("A man riding a horse.", "reshuffle", rng=5)
    assert out is not None and out[0].isupper()
    assert "A" not in tokenize(out)[1:], out  # the sentence-initial article lost its capital when it moved


def test_not_applicable_and_symmetric_cases_return_none():
    assert rewrite("A photo of a dog.", "swap_nouns") is None  # one noun only
    assert rewrite("A dog and a cat.", "swap_nouns") is None  # symmetric coordination
    assert rewrite("A red and white bus.", "swap_adjectives") is None
    assert rewrite("A big red bus.", "swap_adjectives") is None  # stacked adjectives keep the meaning
    assert rewrite("A dog next to a dog.", "swap_nouns") is None  # same word: nothing changes
    assert rewrite("", "reshuffle") is None
    assert rewrite("dog", "reshuffle") is None
    assert make_negatives("", k=3) == []
    assert make_negatives("A cat.", rules=["swap_nouns"], k=3) == []


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="unknown rewrite rule 'bogus'"):
        rewrite("a dog", "bogus")
    with pytest.raises(ValueError, match="unknown rewrite rule"):
        make_negatives("a dog", rules=["swap_nouns", "x"])
    with pytest.raises(TypeError, match="caption must be a str"):
        rewrite(None, "swap_nouns")
    with pytest.raises(ValueError, match="k must be"):
        make_negatives("a dog", k=-1)
    with pytest.raises(ValueError, match="no LLM prompt"):
        rewrite("a dog on a cat", "shuffle_trigrams", llm=lambda p: "x")


# ---- LLM path -------------------------------------------------------------------------------------------------
def test_prompt_structure_per_rule():
    for rule in DEGLA_RULES:
        p = build_prompt("A cat on a mat.", rule)
        assert p.count("Caption:") == len(PROMPTS[rule].examples) + 1 >= 3
        assert p.rstrip().endswith("Caption: A cat on a mat.\nNegative:")
        assert PROMPTS[rule].instruction.splitlines()[0] in p


@given(st.text(max_size=60))
@settings(max_examples=200, deadline=None)
def test_llm_garbage_is_never_returned_unchecked(reply):
    cap = "A dog on a red bed."
    for rule in DEGLA_RULES:
        out = rewrite(cap, rule, llm=lambda p: reply)
        assert out is None or (is_changed(cap, out) and rule_consistent(cap, out, rule))


def test_llm_outputs_are_parsed_and_validated():
    seen = []

    def llm(prompt):
        seen.append(prompt)
        return "Sure! Here it is.\nNegative: 'A bed on a red dog.'\n"

    assert rewrite("A dog on a red bed.", "swap_nouns", llm=llm) == "A bed on a red dog."
    assert len(seen) == 1 and "swap the positions of two nouns" in seen[0]
    rej = Counter()
    negs = make_negatives("A dog on a red bed.", DEGLA_RULES, k=5, llm=lambda p: "A DOG on a red bed", rejections=rej)
    assert negs == [] and rej["unchanged"] == 15  # 3 attempts per requested negative, all refused
    negs = make_negatives(
        "A dog on a red bed.",
        ["replace_nouns"],
        k=2,
        llm=lambda p, it=iter(["A cat on a red bed.", "A cat on a red bed.", "A horse on a red bed."]): next(it),
    )
    assert [n.text for n in negs] == ["A cat on a red bed.", "A horse on a red bed."] and negs[0].source == "llm"


def test_parse_llm_output():
    assert parse_llm_output("Negative caption: A cat.") == "A cat."
    assert parse_llm_output("- “A cat on a mat.”") == "A cat on a mat."
    assert parse_llm_output(None) is None and parse_llm_output("Negative:   ") is None


# ---- validator and taggers -----------------------------------------------------------------------------------
def test_validator_drops_hard_positives():
    calls = []

    def validator(cap, neg):
        calls.append(neg)
        return "cat" not in neg

    rej = Counter()
    negs = make_negatives(
        "A dog on a bed.", ["replace_nouns"], k=4, rng=0, validator=validator, rejections=rej, max_attempts=40
    )
    assert calls and all("cat" not in n.text for n in negs)
    assert rej["validator"] == sum("cat" in c for c in calls)


def test_pluggable_tagger_protocol():
    "A spaCy-like tagger (here a fake) is used instead of the lexicon: unknown words become editable."

    def fake(text):
        return [(t, "NOUN" if t.lower() in ("hydrant", "zeppelin") else "X") for t in tokenize(text)]

    out = rewrite("A hydrant under a zeppelin.", "swap_nouns", tagger=fake)
    assert out == "A zeppelin under a hydrant."
    assert rewrite("A hydrant under a zeppelin.", "swap_nouns") is None  # the lexicon does not know them

    class Tok:
        def __init__(self, t, p):
            self.text, self.pos_, self.is_space = t, p, False

    nlp = lambda text: [Tok(t, p) for t, p in fake(text)]
    assert rewrite("A hydrant under a zeppelin.", "swap_nouns", tagger=spacy_tagger(nlp)) == out


def test_default_tagger_without_spacy_is_lexicon():
    try:
        import spacy  # noqa: F401
    except ImportError:
        assert isinstance(default_tagger(), LexiconTagger)


def test_order_rules_keep_words():
    cap = "A man riding a brown horse on a sandy beach near the water."
    for rule in ORDER_RULES:
        out = rewrite(cap, rule, rng=1)
        assert out is not None and Counter(normalize_text(out).split()) == Counter(normalize_text(cap).split()), rule


def test_speed_thousand_captions():
    import time

    caps = [f"A {c} {n} sitting on a wooden table next to a {m}." for c in ADJS for n in NOUNS for m in NOUNS][:1000]
    t0 = time.perf_counter()
    for i, c in enumerate(caps):
        make_negatives(c, rng=i, k=4)
    assert time.perf_counter() - t0 < 10


def test_no_article_before_mass_noun():
    for seed in range(40):
        out = rewrite("A plate with a sandwich on a table.", "replace_nouns", rng=seed)
        toks = normalize_text(out).split()
        assert not any(
            a in ("a", "an") and b in ("rice", "meat", "bread", "water", "snow", "grass", "broccoli", "salad")
            for a, b in zip(toks, toks[1:])
        ), out


def test_round_robin_tries_every_applicable_rule():
    negs = make_negatives("Two giraffes standing next to a tall tree in a grassy field.", DEGLA_RULES, k=4, rng=0)
    assert {n.rule for n in negs} == {"reshuffle", "swap_nouns", "replace_adjectives", "replace_nouns"}


def test_adjective_swaps_prefer_same_kind():
    for seed in range(20):
        out = rewrite("A small red car next to a white house with a wooden door.", "swap_adjectives", rng=seed)
        assert out == "A small white car next to a red house with a wooden door.", out


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.sampled_from(ALL_RULES), st.integers(0, 100))
def test_arbitrary_text_never_crashes_and_never_returns_invalid(text, rule, seed):
    out = rewrite(text, rule, rng=seed)
    assert out is None or (is_changed(text, out) and rule_consistent(text, out, rule))
    negs = make_negatives(text, ALL_RULES, k=3, rng=seed)
    assert all(is_changed(text, n.text) for n in negs)


def test_unicode_words_are_slots():
    out = rewrite("Un chien brun à côté d'un café.", "reshuffle", rng=0)
    assert out is not None and sorted(normalize_text(out).split()) == sorted(
        normalize_text("Un chien brun à côté d'un café.").split()
    )
