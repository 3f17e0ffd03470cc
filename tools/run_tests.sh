#!/usr/bin/env bash
# Run the whole test suite: every notebook (nbdev-test) and pytest, then one closing line
# "N passed, N failed[, N skipped]" covering both. Usage: tools/run_tests.sh [extra pytest args]
# Expects the project's virtual environment in .venv (README's install command) unless HIERBENCH_BIN names its bin/.
# NB_FILE_RE (a regular expression over notebook file names, nbdev-test's --file-re) runs only the notebooks it matches.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN="${HIERBENCH_BIN:-.venv/bin}"
log=$(mktemp -d)
NB_FILE_RE="${NB_FILE_RE:-.*}"
n_nb=$(find nbs -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' -not -name '_*' | grep -v '/_' | xargs -r -n1 basename | grep -cE "$NB_FILE_RE")

echo "== notebooks: nbdev-test ($n_nb notebooks)"
"$BIN/nbdev-test" --do-print --n-workers 2 --file-re "$NB_FILE_RE" 2>&1 | tee "$log/nb.txt"
nb_rc=${PIPESTATUS[0]}
nb_failed=$(awk '/Tests Failed On The Following Notebooks/{f=1;next} f&&/\.ipynb/{c++} END{print c+0}' "$log/nb.txt")  # count the listed notebooks, not the ==== rule under the header
[ "$nb_rc" -ne 0 ] && [ "$nb_failed" -eq 0 ] && nb_failed=1
nb_passed=$((n_nb - nb_failed))

# pytest on two worker processes (pytest-xdist, in [dev]): a test file goes whole to one worker, so its module fixtures
# are built once; each worker gets one torch thread (two workers x two threads would oversubscribe two cores, and
# OpenMP's spinning threads make that slower than one process). PYTEST_WORKERS=0 runs the tests in this process.
workers="${PYTEST_WORKERS:-2}"
xdist=()
if [ "$workers" != 0 ] && "$BIN/python" -c "import xdist" 2>/dev/null; then xdist=(-n "$workers" --dist loadfile); fi
# the docs tests read a built preview: build it once here (as CI does) so no worker builds it beside another's tests
if [ ${#xdist[@]} -gt 0 ] && [ -z "${HIERBENCH_DOCS_DIR:-}" ]; then
  "$BIN/hierbench" docs --out "$log/_docs" > "$log/docs.txt" 2>&1 && export HIERBENCH_DOCS_DIR="$log/_docs"
fi
echo "== pytest${xdist:+ (${workers} workers)}"
threads=()
[ ${#xdist[@]} -gt 0 ] && threads=(env "OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}")
"${threads[@]}" "$BIN/python" -m pytest -q -p no:cacheprovider --durations=25 "${xdist[@]}" "$@" 2>&1 | tee "$log/py.txt"
py_rc=${PIPESTATUS[0]}
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log/py.txt" | tail -1)
num() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
py_passed=$(num passed); py_failed=$(( $(num failed) + $(num error) )); py_skipped=$(num skipped)
[ "$py_rc" -ne 0 ] && [ "$py_rc" -ne 5 ] && [ "$py_failed" -eq 0 ] && py_failed=1

echo "notebooks: $nb_passed passed, $nb_failed failed; pytest: $py_passed passed, $py_failed failed, $py_skipped skipped"
echo "$((nb_passed + py_passed)) passed, $((nb_failed + py_failed)) failed, $py_skipped skipped"
[ "$nb_failed" -eq 0 ] && [ "$py_failed" -eq 0 ]
