#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each one, one after the other, for a bounded time.
#
#   tools/run_fuzzers.sh [SECONDS_PER_FUZZER] [FUZZER...]
#
#   SECONDS_PER_FUZZER  default 300 (CI: 30)
#   FUZZER...           default: every fuzz/fuzz_*.cpp (fuzz_gguf, fuzz_safetensors, fuzz_tokenizer)
#
# Environment:
#   SPECDEC_FUZZ_BUILD  build directory (default build/fuzz)
#   SPECDEC_FUZZ_JOBS   parallel compile jobs (default 2)
#   SPECDEC_FUZZ_ARGS   extra libFuzzer flags, e.g. "-max_len=65536"
#
# Each fuzzer starts from its committed seeds in fuzz/corpus/<name>/ (name without "fuzz_") and
# grows a working corpus in $SPECDEC_FUZZ_BUILD/corpus/<name>/, which persists between runs. A crash,
# leak, sanitizer report or timeout leaves its input in $SPECDEC_FUZZ_BUILD/artifacts/<name>/ and
# makes the script exit non-zero (after running the remaining fuzzers). Reproduce a finding with
#   $SPECDEC_FUZZ_BUILD/fuzz/fuzz_<name> <artifact file>
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-300}
[ $# -gt 0 ] && shift
build=${SPECDEC_FUZZ_BUILD:-$root/build/fuzz}
jobs=${SPECDEC_FUZZ_JOBS:-2}

if [ $# -gt 0 ]; then
  fuzzers=("$@")
else
  fuzzers=()
  for src in "$root"/fuzz/fuzz_*.cpp; do fuzzers+=("$(basename "$src" .cpp)"); done
fi

command -v clang++ >/dev/null || { echo "run_fuzzers.sh: clang++ not found (apt-get install clang)" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSPECDEC_BUILD_FUZZERS=ON -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=OFF \
  -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_CUDA=OFF >/dev/null
cmake --build "$build" --target "${fuzzers[@]}" -j "$jobs"

failed=()
for fuzzer in "${fuzzers[@]}"; do
  name=${fuzzer#fuzz_}
  corpus="$build/corpus/$name"
  artifacts="$build/artifacts/$name"
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [ -d "$root/fuzz/corpus/$name" ] && seeds=("$root/fuzz/corpus/$name")
  echo "=== $fuzzer: ${seconds} s, corpus $corpus, seeds ${seeds[*]:-none}"
  # -timeout: an input taking over 10 s is a finding (every reader is linear in its input);
  # -rss_limit_mb: so is one needing over 2 GB.
  # shellcheck disable=SC2086
  if ! "$build/fuzz/$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$artifacts/" ${SPECDEC_FUZZ_ARGS:-} \
       "$corpus" "${seeds[@]}"; then
    failed+=("$fuzzer")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers.sh: findings in ${failed[*]} (inputs under $build/artifacts/)" >&2
  exit 1
fi
echo "run_fuzzers.sh: ${fuzzers[*]} ran ${seconds} s each without a finding"
