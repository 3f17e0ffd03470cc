"""Paraphrase files for READ (issue 27): the rule-based generator (honest about not being a language model), a local
Hugging Face seq2seq / causal LM built on the spot (nothing downloaded), validation against the negative rules, the
statistics, the file `train read --paraphrases` reads, and the one-line refusal without one."""

import json
import sys
from pathlib import Path

import pytest
import torch

from hierbench.data import paraphrases as PP, real_data as RD
from hierbench.data.negatives import ALL_RULES, make_negatives, normalize_text
from hierbench.recipes.registry import get_recipe

sys.path.insert(0, str(Path(__file__).parents[1]))
from hf_fixtures import word_tokenizer  # noqa: E402

HIER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hierarcaps" / "hierarcaps_test.csv"
CAPS = [
    "A man rides a big horse on the street.",
    "A dog and a cat sit on a red bench.",
    "Two women holding a small cup.",
    "Zebras graze.",
    "A large jet airplane on a tarmac.",
    "a man and a woman near a white car",
]


def real_captions(n=150):
    if not HIER.is_file():
        return CAPS
    from hierbench.data.loaders import load_hierarcaps

    return [it.chain[-1] for it in load_hierarcaps(HIER)[:n]]


def rule_test_captions(n=150):
    """Captions the negative rules rewrite: HierarCaps' when ../shared is beside the clone, else the built-in world's
    caption chains (every clone has them; 60 scenes give over 100 distinct captions and about 1,000 negatives)."""
    if HIER.is_file():
        return real_captions(n)
    from hierbench.world.scenes import make_scene

    return list(dict.fromkeys(t for i in range(60) for t in make_scene(i).chain))[:n]


# ---- validation ---------------------------------------------------------------------------------------------------
def test_every_negative_rule_output_is_rejected():
    """What hierbench.data.negatives makes from a caption is never accepted as its paraphrase (a coordination reorder
    aside)."""
    n = 0
    for cap in rule_test_captions():
        ok = {normalize_text(t) for t in PP.coordination_reorders(cap)}
        for neg in make_negatives(cap, ALL_RULES, rng=3):
            if normalize_text(neg.text) in ok:
                continue  # a reshuffle that happens to reorder a coordination keeps the meaning
            assert PP.check_paraphrase(cap, neg.text) is not None, (cap, neg)
            n += 1
    assert n > 100


def test_check_reasons():
    c = "A small dog and a cat sit on a red bench."
    assert PP.check_paraphrase(c, "") == "empty" and PP.check_paraphrase(c, None) == "empty"
    assert PP.check_paraphrase(c, "a small dog and a cat sit on a red bench") == "unchanged"
    assert PP.check_paraphrase(c, "dog") == "length"
    assert PP.check_paraphrase(c, "A small cat and a dog sit on a red bench.") == "reordered"  # adjective moved: a swap
    assert PP.check_paraphrase(c, "A small dog and a cat sit on a green bench.") == "replaced"
    assert PP.check_paraphrase(c, "A small dog and a cat sit on a red wooden bench.") == "added"
    assert PP.check_paraphrase(c, "A little puppy and a kitten sit on a red bench.") is None
    assert PP.check_paraphrase(c, "A cat and a small dog sit on a red bench.") is None
    assert set(PP.REJECTION_REASONS) == {"empty", "unchanged", "length", "reordered", "replaced", "added"}


# ---- the rule-based generator -------------------------------------------------------------------------------------
def test_rules_file_stats_and_honest_name(tmp_path):
    caps = real_captions() + real_captions()[:10]  # duplicates counted once
    out = tmp_path / "para.jsonl"
    st = PP.generate_paraphrases(caps, out, "rules", seed=0)
    assert st["generator"] == "rules" and "not a language model" in st["generator_kind"]
    assert st["captions"] == len(set(caps)) == st["paraphrased"] + st["captions_without_paraphrase"]
    assert 0 < st["paraphrased"] < st["captions"]
    assert json.loads((tmp_path / "para.jsonl.stats.json").read_text()) == st
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(lines) == st["paraphrased"]
    for rec in lines:
        assert PP.check_paraphrase(rec["caption"], rec["paraphrase"]) is None
    loaded = RD.load_paraphrases(out)  # the format `train read --paraphrases` reads
    assert loaded == {r["caption"]: r["paraphrase"] for r in lines}
    again = tmp_path / "again.jsonl"
    assert PP.generate_paraphrases(caps, again, "rules", seed=0) == st and again.read_text() == out.read_text()


def test_rejections_counted_by_reason(tmp_path):
    def gen(captions):
        return [["", c, c.replace("dog", "cat"), c.replace("red", "blue"), c.replace("dog", "puppy")] for c in captions]

    gen.name, gen.kind = "stub", "test stub"
    st = PP.generate_paraphrases(["A dog on a red bench.", "A cat."], tmp_path / "p.jsonl", gen)
    assert st["paraphrased"] == 1 and st["captions_without_paraphrase"] == 1
    # caption 1: empty, unchanged, replaced (dog->cat), replaced (red->blue), then puppy accepted
    # caption 2: empty, unchanged x3 (no dog/red in it), unchanged (puppy replace is a no-op) -> none
    assert st["rejected"] == {"empty": 2, "replaced": 2, "unchanged": 5}
    assert (st["generator"], st["generator_kind"]) == ("stub", "test stub")


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="no \\(non-empty\\) captions"):
        PP.generate_paraphrases(["", "  "], tmp_path / "x")
    with pytest.raises(ValueError, match="expected 'rules' or 'hf:DIR'"):
        PP.generate_paraphrases(["a cat"], tmp_path / "x", "t5")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        PP.generate_paraphrases(["a cat"], tmp_path / "x", "hf:t5-small")
    assert not (tmp_path / "x").exists()


# ---- a local Hugging Face model ------------------------------------------------------------------------------------
def tiny_t5(folder: Path) -> Path:
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    tok = word_tokenizer()
    tok.eos_token = "[SEP]"
    T5ForConditionalGeneration(
        T5Config(
            vocab_size=len(tok),
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_heads=2,
            pad_token_id=0,
            eos_token_id=3,
            decoder_start_token_id=0,
        )
    ).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def tiny_gpt2(folder: Path) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    tok = word_tokenizer()
    tok.eos_token = "[SEP]"
    GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok),
            n_embd=16,
            n_layer=1,
            n_head=2,
            n_positions=64,
            bos_token_id=2,
            eos_token_id=3,
            pad_token_id=0,
        )
    ).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("build,kind", [(tiny_t5, "seq2seq"), (tiny_gpt2, "causal")])
def test_local_hf_model(tmp_path, build, kind, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a download attempt would fail loudly
    path = build(tmp_path / kind)
    gen = PP.make_paraphraser(f"hf:{path}", num_candidates=3, max_new_tokens=6, batch_size=4)
    assert gen.seq2seq == (kind == "seq2seq") and kind in gen.name and gen.kind == "language model"
    cands = gen(CAPS[:5])
    assert len(cands) == 5 and all(1 <= len(c) <= 3 and all(isinstance(t, str) for t in c) for c in cands)
    st = PP.generate_paraphrases(CAPS, tmp_path / "p.jsonl", f"hf:{path}", num_candidates=3, max_new_tokens=6)
    assert st["generator"].startswith(f"hf:{path}") and st["generator_kind"] == "language model"
    assert st["captions"] == len(CAPS) and st["candidates"] >= len(CAPS)
    # a random model's output is word salad: whatever it kept passed the checks, the rest is counted by reason
    kept = [json.loads(l) for l in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(kept) == st["paraphrased"]
    for r in kept:
        assert PP.check_paraphrase(r["caption"], r["paraphrase"]) is None
    assert sum(st["rejected"].values()) + st["paraphrased"] <= st["candidates"]


def test_hf_prompt_needs_a_slot(tmp_path):
    path = tiny_gpt2(tmp_path / "g")
    with pytest.raises(ValueError, match="no \\{caption\\} slot"):
        PP.HFParaphraser(path, prompt="paraphrase this")


# ---- training READ on real data ------------------------------------------------------------------------------------
def test_read_without_paraphrases_says_what_to_run():
    data = RD.RealData("coco:/data/karpathy.json", image_root="/data/imgs")
    with pytest.raises(RD.MissingTrainingFileError) as e:
        RD.real_source(get_recipe("read"), None, data)
    msg = str(e.value)
    assert (
        "\n" not in msg
        and ("`hierbench paraphrases --data coco:/data/karpathy.json --image-root /data/imgs --jsonl") in msg
    )
    with pytest.raises(RD.MissingTrainingFileError, match="hierbench negatives --data coco:x.json --rules negclip"):
        RD.require_training_files(get_recipe("negclip"), RD.RealData("coco:x.json"))


def _records(caps_per_image):
    from PIL import Image

    return [
        RD.ImageTextRecord(str(k), lambda: Image.new("RGB", (40, 30)), tuple(caps), source="mem")
        for k, caps in enumerate(caps_per_image)
    ]


def test_dataset_trains_on_paraphrased_captions_only():
    recs = _records([["a dog", "a puppy runs"], ["a cat"], ["a big car", "a bus"]])
    para = {"a dog": "a puppy", "a big car": "a large car"}
    fields = ("images", "captions", "paraphrases")
    with pytest.warns(RD.DataWarning, match="1 of 3 images have no caption with a paraphrase"):
        ds = RD.ImageTextDataset(recs, lambda im: torch.zeros(3, 4, 4), fields, paraphrases=para)
    assert len(ds) == 2
    for e in range(4):
        ds.set_epoch(e)
        for i in range(len(ds)):
            assert para[ds[i]["caption"]] == ds[i]["paraphrase"]
    from hierbench.data.batch import DataFormatError

    with pytest.raises(DataFormatError, match="no caption is in the paraphrase file"):
        RD.ImageTextDataset(recs, lambda im: im, fields, paraphrases={"x": "y"})
