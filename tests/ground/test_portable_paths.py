"""Files the repository keeps under nbs/results (ledger records, results pages and their data) name folders relative to
the repository or not at all (issue 55): an absolute path only says where one machine kept them."""

import gzip
import re
from pathlib import Path

from hierbench.config import portable_path

ROOT = Path(__file__).resolve().parents[2]
# a path of a machine: one of the usual roots of Linux and macOS, or a drive letter
ABSOLUTE = re.compile(r"(?<![\w.~])(/(?:work|root|home|tmp|Users|mnt|var|opt|srv)/[^\s\"'`)\]]+|[A-Z]:\\\\[^\s\"']+)")


def kept_text(path: Path) -> str | None:
    if path.suffix in (".png", ".jpg", ".npz"):
        return None
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


def test_no_committed_results_file_names_an_absolute_path():
    found = []
    for path in sorted((ROOT / "nbs" / "results").rglob("*")):
        if path.is_file() and (text := kept_text(path)) is not None:
            found += [f"{path.relative_to(ROOT)}: {m}" for m in ABSOLUTE.findall(text)]
    assert not found, "\n".join(found[:10])


def test_the_pattern_sees_what_it_must():
    text = 'made {"source": "/root/hierbench-runs/x"} and `/work/runs/y`, not ~/hierbench-runs or ../shared/data'
    assert ABSOLUTE.findall(text) == ["/root/hierbench-runs/x", "/work/runs/y"]


def test_portable_path_is_relative_to_the_repository_or_none(tmp_path):
    assert portable_path(ROOT / "nbs" / "results" / "data") == "nbs/results/data"
    assert portable_path(tmp_path) is None


def test_outside_a_repository_the_caches_are_the_users_platform_folders(tmp_path, monkeypatch):
    "Issue 55: run from two folders without a settings.ini above them, one cache (a retrained parent found again)."
    from hierbench.config import load_settings

    monkeypatch.delenv("HIERBENCH_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    seen = []
    for where in ("a", "b"):
        (tmp_path / where).mkdir()
        monkeypatch.chdir(tmp_path / where)
        s = load_settings(env={})
        seen.append((s.source, s.cache_dir, s.checkpoints_dir))
    assert (
        seen[0] == seen[1] == (None, tmp_path / "cache" / "hierbench", tmp_path / "data" / "hierbench" / "checkpoints")
    )
    monkeypatch.chdir(ROOT)  # inside the repository: settings.ini's folders, beside it
    assert load_settings(env={}).cache_dir == ROOT / ".cache" / "hierbench"
