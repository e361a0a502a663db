#!/usr/bin/env bash
# Runs clang-tidy (the checks of .clang-tidy) over the library: every translation unit under src/
# and cuda/host/ in BUILD_DIR's compile_commands.json, and through them the headers under
# include/specdec/ (.clang-tidy's HeaderFilterRegex). Any finding fails the run.
#
#   tools/run_clang_tidy.sh [BUILD_DIR] [JOBS]     (defaults: build/ci, 2)
#
# CI runs it as the ctest test lint.clang_tidy of the ci preset (SPECDEC_CLANG_TIDY=ON). Fix a
# finding, or relax the rule in .clang-tidy with the reason beside it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/ci}
jobs=${2:-2}
[ -f "$build/compile_commands.json" ] || { echo "run_clang_tidy: no $build/compile_commands.json" >&2; exit 1; }
runner=$(command -v run-clang-tidy || command -v run-clang-tidy-14 || true)
[ -n "$runner" ] || { echo "run_clang_tidy: run-clang-tidy not found (Debian: clang-tidy)" >&2; exit 1; }

# One entry per source file (the emulated CUDA build compiles cuda/host/ a second time: once is
# enough), as a regex of absolute paths.
files=$(python3 - "$build/compile_commands.json" "$root" <<'PY'
import json, os, re, sys
entries = json.load(open(sys.argv[1]))
root = sys.argv[2]
seen = sorted({os.path.normpath(os.path.join(e["directory"], e["file"])) for e in entries})
keep = [f for f in seen
        if re.match(re.escape(root) + r"/(src|cuda/host)/.*\.cpp$", f)]
print("\n".join(keep))
PY
)
count=$(echo "$files" | grep -c . || true)
[ "$count" -gt 0 ] || { echo "run_clang_tidy: no library sources in $build" >&2; exit 1; }
echo "run_clang_tidy: $count files, $jobs jobs"
start=$(date +%s)
# shellcheck disable=SC2086
# (run-clang-tidy 14 has no -warnings-as-errors: the findings are counted from its output.)
# The CPU kernels' GCC-only flags (-Wno-maybe-uninitialized) are not clang's: not an error here.
"$runner" -p "$build" -j "$jobs" -quiet -extra-arg=-Wno-unknown-warning-option $(echo "$files" | sed 's/[.+]/\\&/g; s/^/^/; s/$/$/') \
  > "$build/clang-tidy.log" 2>&1 || status=$?
status=${status:-0}
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$build/clang-tidy.log" |
  grep -E "^($root/.*: )?(warning|error):" | sort -u || true)
[ -n "$findings" ] && echo "$findings"
n=$(echo -n "$findings" | grep -c . || true)
echo "run_clang_tidy: $(( $(date +%s) - start )) s, $n findings, run-clang-tidy status $status" \
  "(full log: $build/clang-tidy.log)"
[ "$status" -eq 0 ] && [ "$n" -eq 0 ]
