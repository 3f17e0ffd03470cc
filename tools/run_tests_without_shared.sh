#!/usr/bin/env bash
# The tests and notebooks that read ../shared, run as in a user's clone, where ../shared does not exist: the working
# tree's files (tracked and untracked-but-not-ignored) are copied into a fresh temporary folder with no `shared` beside
# it, and run there against this checkout's virtual environment (PYTHONPATH puts the copy's package first). A test that
# needs the shared data without skipping, or whose fallback asserts something false, fails here. Selected: the tests of
# every tests/**/test_*.py whose text names the shared folder that may read it (their code, a fixture they use or a
# skip reason leads there: tests/conftest.py, HIERBENCH_SHARED_ONLY; the others ran in the main suite and do the same
# without it), and every notebook outside nbs/results/ whose text names the shared folder. Prints the closing line
# "N passed, N failed, N skipped" of tools/run_tests.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
BIN="${HIERBENCH_BIN:-$repo/.venv/bin}"
case "$BIN" in /*) ;; *) BIN="$repo/$BIN" ;; esac
where=$(mktemp -d)
trap 'rm -rf "$where"' EXIT
clone="$where/clone"
mkdir -p "$clone"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$clone" 2>/dev/null
if [ -e "$where/shared" ] || [ -e "$clone/../shared" ]; then echo "a shared folder is visible from $clone"; exit 1; fi
cd "$clone"
tests=$(grep -rl -E '"shared"|\.\./shared|SHARED' tests --include='test_*.py' | sort)
nbs=$(grep -rl -E '\.\./shared|shared/data|"shared"' nbs --include='*.ipynb' | grep -v '^nbs/results/' | xargs -n1 basename | sed 's/\.ipynb$//' | sort -u | paste -sd'|')
echo "== without ../shared (a user's clone, in $clone): notebooks ${nbs//|/, }; $(echo $tests | wc -w) test files"
HIERBENCH_SHARED_ONLY=1 PYTHONPATH="$clone" HIERBENCH_BIN="$BIN" NB_FILE_RE="^(${nbs})\.ipynb\$" tools/run_tests.sh $tests
