"""`hierbench eval --compare A B --page FILE` (issue 53, part 2 for real benchmarks): the paired differences and, per
benchmark, the items only one model gets right, with the option the other one preferred and both margins."""

import json
import warnings

import pandas as pd
import pytest

from hierbench.cli.parser import main
from hierbench.evaluation.item_metrics import differing_items


def _write(folder, name, ok, scores):
    rows = pd.DataFrame(
        dict(
            benchmark="sugarcrepe",
            subset=["swap_att"] * 4 + ["replace_obj"] * 4,
            id=[str(i) for i in range(8)],
            options=[(f"caption {i}", f"negative {i}") for i in range(8)],
            correct=0,
            scores=scores,
            ok=ok,
            image=[f"img{i}.png" for i in range(8)],
        )
    )
    (folder / f"{name}.json").write_text(json.dumps({"sugarcrepe/swap_att": float(rows.ok[:4].mean())}))
    (folder / f"{name}.items.jsonl").write_text(rows.to_json(orient="records", lines=True))
    return rows


def test_the_page_lists_the_items_only_one_model_gets_right(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main installs its one-line warnings
    right, wrong = [0.9, 0.1], [0.2, 0.6]
    a = _write(tmp_path, "a", [True] * 6 + [False] * 2, [right] * 6 + [wrong] * 2)
    b = _write(tmp_path, "b", [False] * 3 + [True] * 5, [wrong] * 3 + [right] * 5)
    items = differing_items(a, b, "sugarcrepe")
    assert sorted(items.id) == ["0", "1", "2", "6", "7"] and set(items.right) == {"a", "b"}
    assert (items[items.right == "a"].negative.str.startswith("negative")).all()
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    for i in (0, 1, 6):  # the other items' files are missing: the page names them instead
        Image.new("RGB", (40, 30), (40 * i, 100, 200)).save(images / f"img{i}.png")
    page = tmp_path / "cmp.html"
    a_json, b_json = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    main(["eval", "--compare", a_json, b_json, "--page", str(page), "--image-root", str(images)])
    assert f"wrote {page}" in capsys.readouterr().out
    html = page.read_text()
    assert "the items only one gets right" in html and "negative 6" in html and "caption 0" in html
    assert html.count("data:image/png;base64,") == 3 and "<td>img2.png</td>" in html
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--leaderboard", str(tmp_path), "--page", str(tmp_path / "x.html")])
    assert "--page goes with --compare" in str(exit_.value.code) and not (tmp_path / "x.html").exists()
