"Tests for hierbench.models.decoder: word tokenizer, caption decoder, READ reconstruction head, T5 adapter."

import json

import pytest
import torch

from hierbench.models.decoder import (
    CaptionDecoder,
    DecoderConfig,
    ReconstructionHead,
    SentenceEncoder,
    T5DecoderAdapter,
    WordTokenizer,
    load_or_pretrain_decoder,
    normalize_caption,
    pretrain_decoder,
    split_words,
)

CAPTIONS = [
    "a red circle left of a blue square",
    "a blue square left of a red circle",
    "a small green triangle above a circle",
    "a circle above a small green triangle",
    "two yellow stars",
    "a big purple circle below a star",
]


@pytest.fixture(scope="module")
def tok():
    return WordTokenizer.from_captions(CAPTIONS)


@pytest.fixture(scope="module")
def pretrained(tok):
    torch.manual_seed(0)
    return pretrain_decoder(CAPTIONS, steps=120, batch_size=6, d_model=32, n_layers=1, n_heads=2, lr=3e-3)


# ---- tokenizer -----------------------------------------------------------------------------------------------------
def test_split_words_punctuation_and_case():
    assert split_words("A Red circle, left of it.") == ["a", "red", "circle", ",", "left", "of", "it", "."]
    assert normalize_caption("  A   dog's ball ") == "a dog's ball"


def test_tokenizer_specials_and_order(tok):
    assert tok.vocab[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.vocab[4] == "a"  # most frequent word first
    assert len(set(tok.vocab)) == len(tok)


@pytest.mark.parametrize("caption", CAPTIONS + ["A RED Circle!", "square left of circle"])
def test_tokenizer_round_trip(tok, caption):
    ids = tok.encode(caption)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    expected = " ".join(w if w in tok.index else "<unk>" for w in split_words(caption))
    assert tok.decode(ids) == expected


def test_tokenizer_batch_padding_and_truncation(tok):
    ids = tok(["a circle", CAPTIONS[0]], max_len=6)
    assert ids.shape == (2, 6) and ids.dtype == torch.long
    assert ids[0].tolist() == [tok.bos_id, tok.index["a"], tok.index["circle"], tok.eos_id, 0, 0]
    assert ids[1, -1].item() == tok.eos_id  # a cut caption still ends in <eos>
    with pytest.raises(TypeError):
        tok("a circle", max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        tok(["a"], max_len=2)


def test_tokenizer_min_count_and_max_size():
    t = WordTokenizer.from_captions(CAPTIONS, min_count=2)
    assert "two" not in t.index and "circle" in t.index
    assert len(WordTokenizer.from_captions(CAPTIONS, max_size=6)) == 6


def test_tokenizer_save_load(tok, tmp_path):
    back = WordTokenizer.load(tok.save(tmp_path / "tok.json"))
    assert back.vocab == tok.vocab
    (tmp_path / "bad.json").write_text(json.dumps({"type": "other"}))
    with pytest.raises(ValueError, match="bad.json"):
        WordTokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="must start"):
        WordTokenizer(["a", "b"])


# ---- decoder -------------------------------------------------------------------------------------------------------
def test_decoder_shapes_and_memory_length_one(tok):
    dec = CaptionDecoder(DecoderConfig(len(tok), d_model=16, n_layers=1, n_heads=2, max_len=12), tok)
    ids = tok(CAPTIONS[:3], 12)
    logits = dec(ids[:, :-1], torch.randn(3, 1, 16))
    assert logits.shape == (3, ids.shape[1] - 1, len(tok))
    # a (B, d) memory is given its length-1 axis; longer memories are refused (READ: one vector per caption)
    torch.testing.assert_close(dec(ids, torch.ones(3, 16)), dec(ids, torch.ones(3, 1, 16)))
    with pytest.raises(ValueError, match=r"\(B, 1, 16\)"):
        dec(ids, torch.randn(3, 2, 16))
    with pytest.raises(ValueError, match="max_len"):
        dec(torch.zeros(1, 13, dtype=torch.long), torch.randn(1, 1, 16))
    with pytest.raises(ValueError, match="vocab_size"):
        CaptionDecoder(DecoderConfig(5), tok)


def test_decoder_is_causal(tok):
    torch.manual_seed(0)
    dec = CaptionDecoder(DecoderConfig(len(tok), d_model=16, n_layers=2, n_heads=2), tok).eval()
    ids, mem = tok([CAPTIONS[0]], 16), torch.randn(1, 1, 16)
    changed = ids.clone()
    changed[0, 5] = tok.index["star"]
    a, b = dec(ids, mem), dec(changed, mem)
    torch.testing.assert_close(a[:, :5], b[:, :5])  # positions before the change do not see it
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_decoder_ignores_padding_in_loss(tok):
    torch.manual_seed(0)
    dec = CaptionDecoder(DecoderConfig(len(tok), d_model=16, n_layers=1, n_heads=2), tok).eval()
    mem = torch.randn(1, 1, 16)
    short = tok(["a circle"], 16)
    padded = torch.cat([short, torch.zeros(1, 5, dtype=torch.long)], 1)
    torch.testing.assert_close(dec.token_loss(mem, short), dec.token_loss(mem, padded))


def test_pretrain_overfits_and_generates(pretrained):
    dec, losses = pretrained
    assert len(losses) == 120
    assert losses[-1] < 0.25 * losses[0], (losses[0], losses[-1])
    assert all(not p.requires_grad for p in dec.parameters()) and not dec.training


def test_pretrain_with_custom_embed_fn_trains_it(tok):
    torch.manual_seed(0)
    enc = SentenceEncoder(tok, d_model=16, n_heads=2)
    before = enc.proj.weight.detach().clone()
    dec, losses = pretrain_decoder(CAPTIONS, embed_fn=enc, steps=5, d_model=16, n_layers=1, n_heads=2, tokenizer=tok)
    assert not torch.equal(before, enc.proj.weight)  # an nn.Module embed_fn is trained jointly
    with pytest.raises(ValueError, match="non-empty"):
        pretrain_decoder(["", " "], steps=1)


def test_generate_reconstructs_from_encoder_memory(tok):
    torch.manual_seed(0)
    enc = SentenceEncoder(tok, d_model=32, n_heads=2)
    dec, _ = pretrain_decoder(
        CAPTIONS, embed_fn=enc, steps=150, batch_size=6, d_model=32, n_layers=1, n_heads=2, lr=3e-3, tokenizer=tok
    )
    with torch.no_grad():
        mem = enc(CAPTIONS).unsqueeze(1)
    out = dec.generate(mem)
    assert out == CAPTIONS  # incl. the swapped pairs: the memory keeps word order


def test_decoder_save_load_exact(pretrained, tmp_path):
    dec, _ = pretrained
    p = dec.save(tmp_path / "sub" / "dec.safetensors")
    assert p.with_suffix(".json").is_file()
    back = CaptionDecoder.load(p).freeze()
    for k, v in dec.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k
    assert back.tokenizer.vocab == dec.tokenizer.vocab and back.config == dec.config
    with pytest.raises(ValueError, match="safetensors"):
        dec.save(tmp_path / "dec.pt")
    with pytest.raises(FileNotFoundError):
        CaptionDecoder.load(tmp_path / "missing.safetensors")


def test_load_or_pretrain_decoder_caches(tmp_path):
    p = tmp_path / "dec.safetensors"
    first = load_or_pretrain_decoder(p, CAPTIONS, steps=2, d_model=16, n_layers=1, n_heads=2)
    assert p.is_file() and not first.training
    again = load_or_pretrain_decoder(p, CAPTIONS, steps=2, d_model=16, n_layers=1, n_heads=2)
    for k, v in first.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    with pytest.warns(UserWarning, match="lacks 1 word"):
        load_or_pretrain_decoder(p, CAPTIONS + ["a hexagon"], steps=2)


# ---- READ reconstruction head -------------------------------------------------------------------------------------
def test_reconstruction_head_gradients_only_to_projection_and_input(pretrained):
    dec, _ = pretrained
    head = ReconstructionHead(width=24, decoder=dec)
    assert head.proj.bias is None and head.proj.weight.shape == (32, 24)
    pooled = torch.randn(3, 24, requires_grad=True)
    loss = head(pooled, CAPTIONS[:3])
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert pooled.grad is not None and pooled.grad.abs().sum() > 0
    assert head.proj.weight.grad is not None
    assert all(p.grad is None for p in head.decoder.parameters())
    head.train()
    assert head.training and not head.decoder.training
    assert [n for n, p in head.named_parameters() if p.requires_grad] == ["proj.weight"]
    with pytest.raises(ValueError, match="targets"):
        head(pooled, CAPTIONS[:2])


def test_reconstruction_head_learns_a_projection(pretrained):
    "Only the Linear trains: from fixed random 'pooled states' the loss must still drop (memory is informative)."
    dec, _ = pretrained
    torch.manual_seed(1)
    head = ReconstructionHead(width=24, decoder=dec)
    pooled = torch.randn(len(CAPTIONS), 24)
    opt = torch.optim.Adam([head.proj.weight], lr=3e-2)
    first = head(pooled, CAPTIONS).item()
    for _ in range(60):
        loss = head(pooled, CAPTIONS)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first, (first, loss.item())


def test_reconstruction_head_under_bf16_autocast(pretrained):
    dec, _ = pretrained
    head = ReconstructionHead(width=24, decoder=dec)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = head(torch.randn(2, 24), CAPTIONS[:2])
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


# ---- T5 adapter ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_t5_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    d = tmp_path_factory.mktemp("t5")
    words = sorted({w for c in CAPTIONS for w in split_words(c)})
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        vocab_size=len(vocab),
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        dropout_rate=0.1,
    )
    transformers.T5ForConditionalGeneration(cfg).save_pretrained(d)
    return d


def test_t5_adapter_loss_and_frozen_reuse(tiny_t5_dir):
    t5 = T5DecoderAdapter(tiny_t5_dir, max_len=16)
    assert t5.d_model == 16
    labels = t5.encode_targets(["a red circle", "two stars"])
    assert labels.shape == (2, 4) and labels[0, 3].item() == t5.tokenizer.eos_token_id
    assert labels[1, 2].item() == t5.tokenizer.eos_token_id and labels[1, 3].item() == -100
    head = ReconstructionHead(width=12, decoder=t5)
    head.train()
    assert not head.decoder.model.training  # dropout off in the frozen decoder
    pooled = torch.randn(2, 12, requires_grad=True)
    loss = head(pooled, ["a red circle", "two yellow stars"])
    assert torch.isfinite(loss) and loss.item() > 0
    loss.backward()
    assert pooled.grad.abs().sum() > 0 and all(p.grad is None for p in t5.parameters())
    # deterministic in eval mode: same loss twice
    torch.testing.assert_close(head(pooled, ["a red circle", "two yellow stars"]), loss)
    assert len(t5.generate(head.memory(pooled), max_len=4)) == 2
    with pytest.raises(ValueError, match=r"\(B, 1, 16\)"):
        t5.token_loss(torch.randn(2, 3, 16), ["a", "b"])


def test_t5_adapter_refuses_missing_dir(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        T5DecoderAdapter(tmp_path / "nope")
