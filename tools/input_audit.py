"""The input audit: every class of malformed benchmark input, generated over every loader it applies to, and what
hierbench does with each — the fuzz table of issue #13; then (`input_audit_cli.py`, issue #42) every format issue 32
added, malformed, run through `hierbench eval` as a user runs it.

    python tools/input_audit.py            # prints both tables (markdown); exit status 1 if any row is unsafe

Outcomes: `clear` (an error naming the file, record and field), `refused` (a path that leaves the image root, named),
`handled` (loaded, the bad records set aside with a DataWarning naming them, every good record kept; or an accepted
variant such as a BOM giving the same items), and the three that must stay at 0: `raw crash` (any other exception, or
an error that does not name the file), `silently accepted` (loaded without a word) and `lost data` (good records
missing). Runs in seconds on synthetic files; `tests/test_input_audit.py` runs it in CI.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd

from hierbench.data import batch as D, loaders as L
from hierbench.evaluation import retrieval as RT
from hierbench.evaluation.compositional import winoground as WG

SAFE = ("clear", "refused", "handled")
UNSAFE = ("raw crash", "silently accepted", "lost data")


# ---- one valid record per format, and how to write a file of them -------------------------------------------------
def _sc(i, **kw):
    return {
        "filename": f"{i:012d}.jpg",
        "caption": f"a dog on sofa {i}",
        "negative_caption": f"a sofa on dog {i}",
        **kw,
    }


def _scpp(i, **kw):
    return {
        "id": i,
        "filename": f"{i:012d}.jpg",
        "caption": f"a cat on mat {i}",
        "caption2": f"on mat {i} sits a cat",
        "negative_caption": f"a mat on cat {i}",
        **kw,
    }


def _valse(i, **kw):
    return {
        "dataset": "coco",
        "image_file": f"{i}.jpg",
        "caption": f"two dogs {i}",
        "foil": f"three dogs {i}",
        "relation_name": "x",
        "mturk": {"caption": 3},
        **kw,
    }


def _hier(i, **kw):
    return {
        "id": i,
        "captions": f"animal {i} => dog => brown dog => brown dog on a sofa",
        "image_url": f"http://x/val2014/COCO_val2014_{i:012d}.jpg",
        **kw,
    }


def _coco(i, **kw):
    return {"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg", "caption": f"a dog on a sofa {i}", **kw}


def _flickr(i, **kw):
    return {"image": f"{1000 + i}.jpg", "caption": f"a child climbs the stairs {i}", **kw}


def _wino(i, **kw):
    return {
        "id": i,
        "caption_0": f"a dog bites a man {i}",
        "caption_1": f"a man bites a dog {i}",
        "image_0": f"ex_{i}_img_0",
        "image_1": f"ex_{i}_img_1",
        "tag": "Noun",
        "secondary_tag": "",
        "num_main_preds": 1,
        "collapsed_tag": "Object",
        **kw,
    }


def _crepe(i, **kw):
    return {
        "image_id": str(i),
        "x": 1,
        "y": 1,
        "width": 30,
        "height": 30,
        "caption": f"a red square {i}",
        "hard_negs": str([f"a green square {i}", f"a red circle {i}"]),
        **kw,
    }


FORMATS = {
    # name: (record maker, caption field, negative field, path field, writer, loader)
    "sugarcrepe": (
        _sc,
        "caption",
        "negative_caption",
        "filename",
        lambda p, recs: _write_json(p / "swap_obj.json", {str(k): r for k, r in enumerate(recs)}),
        lambda p, root: L.load_sugarcrepe(p, root, ["swap_obj"])["swap_obj"],
    ),
    "sugarcrepe++": (
        _scpp,
        "caption",
        "negative_caption",
        "filename",
        lambda p, recs: _write_json(p / "swap_obj.json", recs),
        lambda p, root: L.load_sugarcrepe_pp(p, root, ["swap_obj"])["swap_obj"],
    ),
    "valse": (
        _valse,
        "caption",
        "foil",
        "image_file",
        lambda p, recs: _write_json(p / "existence.json", {str(k): r for k, r in enumerate(recs)}),
        lambda p, root: L.load_valse_file(p / "existence.json", root),
    ),
    "hierarcaps": (
        _hier,
        "captions",
        None,
        None,
        lambda p, recs: pd.DataFrame(recs).to_csv(p / "hierarcaps_test.csv", index=False),
        lambda p, root: L.load_hierarcaps(p / "hierarcaps_test.csv", root),
    ),
    "crepe": (
        _crepe,
        "caption",
        None,
        "image_id",
        lambda p, recs: pd.DataFrame(recs).to_csv(p / "crepe.csv", index=False),
        lambda p, root: L.load_crepe(p / "crepe.csv", root),
    ),
    # retrieval sets (hierbench.evaluation.retrieval): one image per record, its caption; the loader returns the images
    "coco-captions": (
        _coco,
        "caption",
        None,
        "file_name",
        lambda p, recs: _write_coco(p / "coco_test_karpathy.json", recs),
        lambda p, root: RT.load_coco_captions(p / "coco_test_karpathy.json", root).image_ids,
    ),
    "flickr-txt": (
        _flickr,
        "caption",
        None,
        "image",
        lambda p, recs: _write_flickr(p / "flickr30k_test_karpathy.txt", recs),
        lambda p, root: RT.load_flickr_captions(p / "flickr30k_test_karpathy.txt", root).image_ids,
    ),
    # Winoground (hierbench.winoground): its second caption plays the negative (equal captions cannot be scored)
    "winoground": (
        _wino,
        "caption_0",
        "caption_1",
        "image_0",
        lambda p, recs: (
            _write_json(p / "examples.jsonl", "".join(json.dumps(r) + "\n" for r in recs)),
            (p / "images").mkdir(exist_ok=True),
        ),
        lambda p, root: WG.load_winoground(p),
    ),
}
FILE_OF = {
    "sugarcrepe": "swap_obj.json",
    "sugarcrepe++": "swap_obj.json",
    "valse": "existence.json",
    "hierarcaps": "hierarcaps_test.csv",
    "crepe": "crepe.csv",
    "coco-captions": "coco_test_karpathy.json",
    "flickr-txt": "flickr30k_test_karpathy.txt",
    "winoground": "examples.jsonl",
}


def _write_json(path: Path, obj):
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))


def _write_coco(path: Path, recs):
    """COCO-captions format: the records' ids and files as `images`, their captions as `annotations` (absent fields stay
    absent)."""
    images = [{k: r[k] for k in ("id", "file_name") if k in r} for r in recs]
    anns = [{"image_id": r.get("id"), **({"caption": r["caption"]} if "caption" in r else {})} for r in recs]
    _write_json(path, {"images": images, "annotations": anns})


def _write_flickr(path: Path, recs):
    """CLIP_benchmark's Flickr text file: a header, then `IMAGE,caption` per record (a record without a caption: its
    name alone)."""
    cap = lambda r: "" if r["caption"] is None else str(r["caption"])
    path.write_text(
        "image,caption\n" + "".join(f"{r['image']},{cap(r)}\n" if "caption" in r else f"{r['image']}\n" for r in recs)
    )


# ---- the classes: (class, applies to, mutate(records) -> records or raw text, expected outcome) -------------------
def _caption_cases():
    for label, v in (
        ("empty", ""),
        ("zero-width only", "\u200b\u200b\u200b"),
        ("control characters", "\x00\x01"),
        ("blank", " \t "),
        ("20 MB", "a" * 20_000_000),
        ("a number", -7),
        ("null", None),
    ):
        yield f"caption {label}", lambda recs, f, v=v: _set(recs, f[1], v), "clear"


def _set(recs, field, value, k=1):
    recs = [dict(r) for r in recs]
    recs[k][field] = value
    return recs


def _negative_cases():
    for label, fn in (
        ("exact", lambda s: s),
        ("case and spaces", lambda s: "  " + s.upper() + " "),
        ("trailing period", lambda s: s + "."),
    ):
        yield (
            f"negative equal to positive ({label})",
            lambda recs, f, fn=fn: _set(recs, f[2], fn(recs[1][f[1]])),
            "handled",
        )


def _path_cases():
    for v in ("../../../../etc/passwd", "/etc/shadow", "a\x00b.jpg", "../elsewhere/good.jpg"):
        yield f"path {v!r}", lambda recs, f, v=v: _set(recs, f[3], v), "refused"


def _record_cases():
    yield (
        "missing field",
        lambda recs, f: [recs[0], {k: v for k, v in recs[1].items() if k != f[1]}, *recs[2:]],
        "clear",
    )
    yield "record not an object", lambda recs, f: [recs[0], 42, *recs[2:]], "clear"
    yield "duplicate id", lambda recs, f: _set(recs, "id", recs[0]["id"]), "clear"
    yield "id is a dict", lambda recs, f: _set(recs, "id", {"a": 1}), "clear"


def _file_cases():
    yield "deeply nested JSON", "[" * 1200 + "]" * 1200, "clear"
    yield "truncated JSON", None, "clear"  # the valid file cut in half
    yield "not JSON (binary)", "\x89PNG\r\n\x1a\n\x00\x00", "clear"
    yield "empty container", "{}", "clear"
    yield "duplicate JSON key", None, "clear"
    yield "UTF-8 BOM", None, "same items"  # accepted: the same items as without it


def _applies(fmt: str, case: str) -> bool:
    maker, cap, neg, pth, *_ = FORMATS[fmt]
    if case.startswith("negative equal"):
        return neg is not None
    if case.startswith("path"):
        return pth is not None
    csv = FILE_OF[fmt].endswith((".csv", ".txt"))
    # a CSV cell (a text line) is always text: "-7" or "{'a': 1}" there is a (strange) string, not a value of the wrong
    # type
    if case in ("caption a number", "id is a dict") and csv:
        return False
    # a plain text file cut in half is a shorter text file: nothing in the format can tell
    if case == "truncated JSON" and FILE_OF[fmt].endswith(".txt"):
        return False
    if case in ("duplicate id", "id is a dict"):
        return "id" in maker(0)  # dict-keyed files: the key is the id
    if case in ("record not an object",):
        return fmt in ("sugarcrepe", "sugarcrepe++", "valse", "winoground")
    # the audit duplicates a record key of a dict-of-records file; a COCO-captions file's top level is {images,
    # annotations}
    if case == "duplicate JSON key" and fmt == "coco-captions":
        return False
    if case in ("deeply nested JSON", "truncated JSON", "not JSON (binary)", "empty container", "duplicate JSON key"):
        return FILE_OF[fmt].endswith(".json") or case in ("truncated JSON", "not JSON (binary)", "empty container")
    return True


# ---- running one input ---------------------------------------------------------------------------------------------
def _classify(load, folder: Path, root: Path, file: str, expect: str, n_good: int, n_total: int) -> tuple[str, str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            items = load(folder, root)
        except (D.DataFormatError, OSError) as e:
            msg = str(e)
            if file not in msg:
                return "raw crash", f"{type(e).__name__} without the file: {msg[:120]}"
            path_msg = any(s in msg for s in ("image root", "NUL byte", "absolute"))
            return ("refused" if path_msg else "clear"), msg[:160]
        except Exception as e:
            return "raw crash", f"{type(e).__name__}: {str(e)[:120]}"
    said = [str(w.message) for w in caught if issubclass(w.category, D.DataWarning)]
    n = len(items)
    if expect == "same items":
        return (
            ("handled", f"accepted: the same {n} items")
            if n == n_total and not said
            else ("lost data", f"{n} of {n_total} items")
        )
    if n < n_good:
        return "lost data", f"{n} of {n_good} good records loaded"
    if said and n == n_good:
        return "handled", said[0][:160]
    return "silently accepted", f"{n} items, no warning"


def run_audit(n_records: int = 4) -> pd.DataFrame:
    "Every (class, format) input once; one row per input with its outcome and the message a user would see."
    rows = []
    cases = [*_caption_cases(), *_negative_cases(), *_path_cases(), *_record_cases()]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = tmp / "images"
        root.mkdir()
        for fmt, (maker, cap, neg, pth, write, load) in FORMATS.items():
            good = [maker(i) for i in range(n_records)]
            for k, (case, mutate, expect) in enumerate(cases):
                if not _applies(fmt, case):
                    continue
                folder = tmp / f"{fmt}-{k}"
                folder.mkdir()
                write(folder, mutate(good, (None, cap, neg, pth)))
                outcome, msg = _classify(load, folder, root, FILE_OF[fmt], expect, n_records - 1, n_records)
                rows.append(dict(cls=case, format=fmt, expected=expect, outcome=outcome, message=msg))
            for k, (case, text, expect) in enumerate(_file_cases()):
                if not _applies(fmt, case):
                    continue
                folder = tmp / f"{fmt}-file-{k}"
                folder.mkdir()
                write(folder, good)
                f = folder / FILE_OF[fmt]
                raw = f.read_bytes()
                if (
                    case == "truncated JSON"
                ):  # cut inside a record (a JSON-lines file cut at a line end is a valid shorter file)
                    cut = len(raw) // 2
                    f.write_bytes(raw[: cut - 2 if raw[cut - 1 : cut] == b"\n" else cut])
                elif case == "duplicate JSON key":
                    if not raw.startswith(b"{"):
                        continue
                    f.write_text('{"0": %s, %s' % (json.dumps(good[1]), raw.decode()[1:]))
                elif case == "UTF-8 BOM":
                    f.write_bytes(b"\xef\xbb\xbf" + raw)
                elif case == "empty container" and f.suffix == ".csv":
                    f.write_text(raw.decode().splitlines()[0] + "\n")
                else:
                    f.write_text(text)
                outcome, msg = _classify(load, folder, root, FILE_OF[fmt], expect, n_records, n_records)
                rows.append(dict(cls=case, format=fmt, expected=expect, outcome=outcome, message=msg))
            for case, setup in (
                ("a folder in place of the file", lambda f: f.mkdir()),
                ("symlink loop", lambda f: os.symlink(f, f)),
                ("missing file", lambda f: None),
            ):
                folder = tmp / f"{fmt}-{case.replace(' ', '-')}"
                folder.mkdir()
                setup(folder / FILE_OF[fmt])
                outcome, msg = _classify(load, folder, root, FILE_OF[fmt], "clear", n_records, n_records)
                rows.append(dict(cls=case, format=fmt, expected="clear", outcome=outcome, message=msg))
    return pd.DataFrame(rows)


def fuzz_table(audit: pd.DataFrame) -> pd.DataFrame:
    "class | inputs | clear | refused | handled | raw crash | silently accepted | lost data (counts over formats)."
    t = pd.crosstab(audit.cls, audit.outcome).reindex(columns=[*SAFE, *UNSAFE], fill_value=0)
    t.insert(0, "inputs", t.sum(axis=1))
    return t.loc[list(dict.fromkeys(audit.cls))]


def markdown(table: pd.DataFrame, first: str) -> str:
    return "\n".join(
        [f"| {first} | " + " | ".join(table.columns) + " |", "|---|" + "---|" * len(table.columns)]
        + [f"| {k} | " + " | ".join(str(v) for v in r) + " |" for k, r in table.iterrows()]
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    import input_audit_cli as CLI

    audit, cli = run_audit(), CLI.run_cli_audit()
    print(markdown(fuzz_table(audit), "class"))
    bad = audit[audit.outcome.isin(UNSAFE)]
    print(f"\n{len(audit)} inputs over {audit.format.nunique()} loaders: {len(bad)} unsafe\n")
    print(markdown(CLI.cli_table(cli), "format (through `hierbench eval`)"))
    bad_cli = cli[cli.outcome.isin(CLI.UNSAFE)]
    print(
        f"\n{len(cli)} runs ({(cli.via == 'subprocess').sum()} as processes) over {cli.format.nunique()} formats: "
        f"{len(bad_cli)} unsafe"
    )
    for r in [*bad.itertuples(), *bad_cli.itertuples()]:
        print(f"  {r.cls} / {r.format}: {r.outcome} — {r.message}")
    sys.exit(1 if len(bad) or len(bad_cli) else 0)
