#!/usr/bin/env bash
# tools/gpu_check.sh: the CUDA backend's checks and measurements on one GPU, in one run
# (docs/cuda.md, section 10).
#
# The GPU machine has the CUDA toolkit, CMake and ninja but none of the project's Debian packages
# and no network, so the programs are built here and carried: tools/gpu_bundle.sh builds them
# for the GPU's architecture and fills .gpu/ (git-ignored: binaries, the shared libraries they
# need, the trained tiny pair). Then, on the GPU machine, from the repository root:
#
#     OUT=/some/dir tools/gpu_check.sh
#
# Without a GPU the same flow runs on the emulated CUDA backend (small shapes, no timings), from
# a build tree that has the emulated programs (default build/gpu):
#
#     SPECDEC_GPU_CHECK_EMU=1 OUT=/tmp/gpu-check tools/gpu_check.sh
#
# Steps, in this order (the most telling first: a device call has a time limit), each with a time
# limit, its output in $OUT/logs/<step>.log and its exit status and seconds in $OUT/results.json:
#   models    random-weight real-shape models (make_random_gguf), in the background, on the CPUs
#   test.*    the gpu-labelled tests (tests/cuda): kernels, Transformer against the CPU backend,
#             device sampler decisions against the host sampler, speculative decoding on the GPU
#   logits.*  one forward's logits, GPU against the CPU backend, on the same files (the trained
#             pair, then the random-weight models; tools/compare_logits.py, the tests' tolerances)
#   greedy.pair, sampled.pair   `specdec bench --backend cuda` on the trained pair: greedy
#             speculative output must equal target-only (bench fails otherwise); temperature 0.8
#   suffix.greedy, suffix.sampled   the same with suffix decoding's token trees (forward_tree,
#             the device tree verification, accept_path): chains and trees of 4, 15 and 40 nodes
#             (a tree of more than 16 nodes with the last token takes several steps)
#   bench.*   bench_cuda on the random models: T(n) and the roofline, token trees against chains,
#             prefill, the device round with forced acceptance, a draft pair (greedy tokens
#             compared with plain decoding); the Qwen Q4_K_M models also with one weight row per
#             lane in the skinny GEMM (bench.*.rows1)
#   sanitizer.*  compute-sanitizer's memcheck and racecheck on the small tests
#   dev.*     the kernel harness (cuda/dev): every variant checked against its CPU reference and
#             timed against the memory bandwidth peak
#   sanitizer.racecheck.attention, sanitizer.memcheck.trees   the longer ones, with the time left:
#             the attention tests under racecheck, the Transformer's tree tests under memcheck
# The device tool returns at most 8 files, so the logs are packed into $OUT/logs.tar.gz and
# $OUT/summary.txt holds the lines worth reading. Exit status: the number of failed steps.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-/tmp/gpu-check}
emu=${SPECDEC_GPU_CHECK_EMU:-0}
mkdir -p "$OUT/logs"
logs=$OUT/logs
results=$OUT/results.jsonl
: >"$results"
started=$(date +%s)

# ---------------------------------------------------------------- where the programs are
if [ "$emu" = 1 ]; then
  build=${SPECDEC_BUILD:-build/gpu}
  bin=$root/$build/bin
  tests=$root/$build/tests/cuda
  dev=$root/$build/cuda/dev
  cli=$bin/specdec-emu
  bench_cuda=$root/$build/bench/specdec_bench_cuda_emu
  make_random=$root/$build/bench/make_random_gguf
  test_prefix=cuda_emu_
  dev_prefix=cuda_emu_dev_
  pair=${SPECDEC_PAIR:-$root/../shared/models/tinyllama-pair}
  models_dir=$OUT/models
else
  [ -d .gpu/bin ] || tar -C .gpu -xJf .gpu/bundle.tar.xz || {
    echo "gpu_check: no .gpu/bundle.tar.xz (made by tools/gpu_bundle.sh)" >&2
    exit 100
  }
  # The binaries bake in the source tree they were built from (test data, the trained pair):
  # make that path lead here when this copy of the tree lives elsewhere.
  built_in=$(cat .gpu/root)
  if [ "$built_in" != "$root" ] && [ ! -e "$built_in" ]; then
    mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in"
  fi
  bin=$root/.gpu/bin
  tests=$bin
  dev=$bin
  cli=$bin/specdec
  bench_cuda=$bin/specdec_bench_cuda
  make_random=$bin/make_random_gguf
  test_prefix=cuda_gpu_
  dev_prefix=cuda_dev_
  pair=$root/.gpu/shared-models/tinyllama-pair
  models_dir=${SPECDEC_GPU_MODELS:-/tmp/specdec-gpu-models}
  # The carried libraries, then the toolkit's cudart and cuBLAS.
  export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
  done
fi
mkdir -p "$models_dir"

# step NAME SECONDS COMMAND...: runs the command with a time limit, its output in the step's log,
# and records {step, rc, seconds} (rc 124: the time limit). The whole run has a budget
# (SPECDEC_GPU_CHECK_BUDGET seconds, default 420: a device call is limited and a start costs
# minutes): a step gets at most what is left of it, and is skipped (rc 125) when nothing is.
# SPECDEC_GPU_CHECK_ONLY (an extended regular expression) runs only the steps whose names match,
# e.g. "test\.|dev\." for a rerun after a fix ("models" makes the random-weight models).
budget=${SPECDEC_GPU_CHECK_BUDGET:-420}
only=${SPECDEC_GPU_CHECK_ONLY:-.}
failed=0
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc left
  echo "$name" | grep -Eq "$only" || return 0
  left=$((budget - ($(date +%s) - started)))
  if [ "$left" -lt 5 ]; then
    printf '{"step": "%s", "rc": 125, "seconds": 0}\n' "$name" >>"$results"
    failed=$((failed + 1))
    echo "SKIP  $name: the run's budget of $budget s is spent"
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local seconds
  seconds=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))")
  printf '{"step": "%s", "rc": %d, "seconds": %s}\n' "$name" "$rc" "$seconds" >>"$results"
  if [ "$rc" -eq 0 ]; then
    echo "ok    $name (${seconds} s)"
  else
    failed=$((failed + 1))
    echo "FAIL  $name: exit $rc (${seconds} s), last lines of $name.log:"
    tail -n 15 "$logs/$name.log" | sed 's/^/      /'
  fi
  return "$rc"
}

# ---------------------------------------------------------------- the device
{
  echo "started $(date -u '+%F %T') UTC, emulated=$emu, tree $root"
  if [ "$emu" = 1 ]; then
    echo "emulated CUDA backend (no GPU)"
  else
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
      --format=csv 2>&1
    nvcc --version 2>&1 | tail -n 2
  fi
  echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cores"
  if [ "$emu" != 1 ]; then
    # A library the loader cannot find stops every program: say which at once.
    ldd "$bin"/* 2>&1 | grep 'not found' | sort -u | sed 's/^/missing library: /'
  fi
} | tee "$OUT/summary.txt"

# ---------------------------------------------------------------- 1. models (background)
# name shape type: every type of each shape the issue asks for (Q4_K_M, Q8_0, BF16). Under the
# emulator only the 68M-parameter Llama shape (its forward takes seconds there).
# SPECDEC_GPU_CHECK_SHAPES / _TYPES (space-separated) narrow them for a short rerun.
if [ "$emu" = 1 ]; then
  shapes=(llama-68m)
else
  read -ra shapes <<<"${SPECDEC_GPU_CHECK_SHAPES:-tinyllama-1.1b qwen2.5-1.5b qwen2.5-0.5b}"
fi
read -ra types <<<"${SPECDEC_GPU_CHECK_TYPES:-q4_k_m q8_0 bf16}"

model_jobs=()
echo models | grep -Eq "$only" || shapes=()
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do
    f=$models_dir/$shape-$type.gguf
    [ -s "$f" ] && continue
    ("$make_random" --shape "$shape" --type "$type" --out "$f.part" >"$logs/model.$shape-$type.log" 2>&1 &&
      mv "$f.part" "$f") &
    model_jobs+=($!)
  done
done

# ---------------------------------------------------------------- 2. the gpu-labelled tests
for t in reduce kernels sampling transformer; do
  step "test.$t" 150 "$tests/$test_prefix$t"
done

# ---------------------------------------------------------------- 3 and 4 on the trained pair
ids_short=$(seq -s, 1 12)  # 12 tokens: one step of the skinny (decode / verify) kernels
ids_long=$(seq -s, 1 40)   # 40 tokens: the prefill path (cuBLAS, f16 activations)
# compare NAME MODEL TOLERANCE [PREFILL_TOLERANCE]: logits of the short and the long input, GPU
# against CPU (the long one with the second tolerance, by default the first).
compare() {
  local name=$1 model=$2
  for ids_name in short long; do
    local ids=$ids_short rows=12 tol=$3
    [ "$ids_name" = long ] && ids=$ids_long rows=40 tol=${4:-$3}
    step "logits.$name.$ids_name.cpu" 90 "$cli" logits --backend cpu -m "$model" --tokens "$ids" \
      -c 64 -ctk f16 -ctv f16 -o "$models_dir/$name.$ids_name.cpu.f32" &&
      step "logits.$name.$ids_name.cuda" 90 "$cli" logits --backend cuda -m "$model" \
        --tokens "$ids" -c 64 -ctk f16 -ctv f16 -o "$models_dir/$name.$ids_name.cuda.f32" &&
      step "logits.$name.$ids_name.compare" 60 python3 tools/compare_logits.py \
        "$models_dir/$name.$ids_name.cuda.f32" "$models_dir/$name.$ids_name.cpu.f32" "$rows" \
        "$tol" "$name $ids_name"
    cat -- "$logs/logits.$name.$ids_name.compare.log" >>"$OUT/summary.txt" 2>/dev/null
  done
}
# F32 weights: the emulated tests' tolerances (tests/cuda/quantised_transformer_test.cpp): 1e-3
# for a step of the skinny kernels after nothing but f16 KV entries, 3e-3 for a prefill, whose
# activations cuBLAS takes in f16 (1.05e-3 seen on an H100 for the 40 tokens).
compare tiny-target "$pair/target-f32.gguf" 1e-3 3e-3
compare tiny-draft "$pair/draft-f32.gguf" 1e-3 3e-3

greedy_args=(-m "$pair/target-f32.gguf" -md "$pair/draft-f32.gguf" --prompts "$pair/eval-prompts.jsonl"
  -k 4 --repeat 1 --json)
if [ "$emu" = 1 ]; then greedy_args+=(--limit 1 -n 8); else greedy_args+=(--limit 5 -n 64); fi
step greedy.pair 120 "$cli" bench --backend cuda --temp 0 "${greedy_args[@]}"
step sampled.pair 120 "$cli" bench --backend cuda --temp 0.8 -s 7 "${greedy_args[@]}"
# Token trees end to end: suffix decoding (no draft model: draft-model trees need host logits).
suffix_args=(-m "$pair/target-f32.gguf" --prompts "$pair/eval-prompts.jsonl" --suffix
  --tree-nodes 0,4,15,40 -k 8 --repeat 1 --json)
if [ "$emu" = 1 ]; then suffix_args+=(--limit 1 -n 8); else suffix_args+=(--limit 5 -n 64); fi
step suffix.greedy 120 "$cli" bench --backend cuda --temp 0 "${suffix_args[@]}"
step suffix.sampled 120 "$cli" bench --backend cuda --temp 0.8 -s 7 "${suffix_args[@]}"
for s in greedy.pair sampled.pair suffix.greedy suffix.sampled; do
  python3 - "$logs/$s.log" "$s" <<'EOF' >>"$OUT/summary.txt" 2>&1
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index("{"):])
draft = dict(j.get("draft_step_seconds") or [])
print(f"bench --backend cuda on the trained pair ({sys.argv[2]}), T "
      f"{j['results'][0]['temperature']}: greedy runs identical "
      f"{j['greedy_runs_identical']}/{j['greedy_runs_compared']}; T(1) "
      f"{1e3 * j['target_forward_seconds'][0]:.3f} ms, T(n)/T(1) "
      + " ".join(f"{t / j['target_forward_seconds'][0]:.2f}" for t in j['target_forward_seconds'])
      + (f"; draft step {1e3 * draft[0]:.3f} ms" if 0 in draft else ""))
for r in j["results"]:
    print(f"  {r['domain']:>6} {r['config']:<28} {r['tokens_per_second']:9.1f} tok/s "
          f"speedup {r['speedup']:.2f} (predicted {r['predicted_speedup']:.2f}) acceptance "
          f"{r['acceptance_rate']:.3f} ms/round {r['ms_per_round']:.3f}")
EOF
done

# ---------------------------------------------------------------- 5. the random-weight models: speed
for job in "${model_jobs[@]}"; do wait "$job"; done
printf '{"step": "models", "rc": 0, "seconds": %d}\n' $(($(date +%s) - started)) >>"$results"
ls -l "$models_dir"/*.gguf >>"$OUT/summary.txt" 2>&1
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do
    f=$models_dir/$shape-$type.gguf
    if [ ! -s "$f" ]; then
      echo "FAIL  model $shape $type was not made:"
      tail -n 5 "$logs/model.$shape-$type.log"
      failed=$((failed + 1))
    fi
  done
done

if [ "$emu" = 1 ]; then
  bench_args=(--repeats 2 --tokens 1,2,4 --context 8 --round-k 2 --round-tokens 6 --prefill 20)
else
  bench_args=(--repeats 30 --tokens 1,2,3,4,5,6,8,10,12,14,16 --context 128 --round-k 4
    --round-tokens 128 --prefill 512)
fi
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do
    f=$models_dir/$shape-$type.gguf
    [ -s "$f" ] || continue
    # A draft pair: the Qwen 1.5B target with the 0.5B of the same type (emulated: the Q8_0
    # 68M model with its Q4_K_M copy).
    draft=
    [ "$shape" = qwen2.5-1.5b ] && draft=$models_dir/qwen2.5-0.5b-$type.gguf
    [ "$emu" = 1 ] && [ "$type" = q8_0 ] && draft=$models_dir/$shape-q4_k_m.gguf
    extra=()
    [ -n "$draft" ] && [ -s "$draft" ] && extra=(--draft "$draft")
    # The Qwen K-quant models also with one weight row per lane in the skinny GEMM (its choice
    # before rows per lane existed), for a same-machine comparison.
    if [ "$type" = q4_k_m ] && [ "$shape" != "${shapes[0]}" ]; then
      step "bench.$shape-$type.rows1" 120 "$bench_cuda" "$f" "${bench_args[@]}" "${extra[@]}" \
        --gemm-rows 1 --json "$logs/bench.$shape-$type.rows1.json"
      [ -f "$logs/bench.$shape-$type.rows1.log" ] &&
        grep -v '^device:' "$logs/bench.$shape-$type.rows1.log" | sed 's/^random/rows per lane 1: random/' >>"$OUT/summary.txt"
    fi
    step "bench.$shape-$type" 120 "$bench_cuda" "$f" "${bench_args[@]}" "${extra[@]}" \
      --json "$logs/bench.$shape-$type.json"
    [ -f "$logs/bench.$shape-$type.log" ] &&
      grep -v '^device:' "$logs/bench.$shape-$type.log" >>"$OUT/summary.txt"
  done
done

# ---------------------------------------------------------------- 6. the random-weight models: logits
# Logits, GPU against CPU, on the K-quant models of every shape and on the other types of the
# smallest (each comparison loads the model twice: a few seconds each).
# Quantised weights: the CPU backend quantises the activations to 8 bits (the emulated tests'
# 5e-2); BF16: it rounds them to bf16 where the CPU has AVX512_BF16 or AMX (docs/cpu.md; 5e-3
# seen under the emulator, 8e-3 on an H100 machine).
for shape in "${shapes[@]}"; do
  for type in "${types[@]}"; do
    f=$models_dir/$shape-$type.gguf
    [ -s "$f" ] || continue
    [ "$type" = q4_k_m ] || [ "$shape" = "${shapes[-1]}" ] || continue
    tol=5e-2
    [ "$type" = bf16 ] && tol=2e-2
    compare "$shape-$type" "$f" "$tol"
  done
done

# ---------------------------------------------------------------- 7. compute-sanitizer
# What the emulator cannot see (races between warps, device memory errors), on the small tests,
# with whatever time is left.
if [ "$emu" != 1 ] && command -v compute-sanitizer >/dev/null; then
  step sanitizer.memcheck.kernels 90 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$tests/${test_prefix}kernels"
  step sanitizer.racecheck.sampling 90 compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$tests/${test_prefix}sampling"
  step sanitizer.racecheck.reduce 60 compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$tests/${test_prefix}reduce"
fi

# ---------------------------------------------------------------- 8. the kernel harness
# Without --check: every variant is checked and, on a GPU, timed. The GEMM for the weight types
# of the Q4_K_M files and BF16 (SPECDEC_DEV_TYPES; all 15 take minutes of CPU time for weights
# and references).
step dev.skinny_gemm 180 env SPECDEC_DEV_TYPES="${SPECDEC_DEV_TYPES:-Q4_K,Q6_K,Q8_0,BF16}" \
  "$dev/${dev_prefix}skinny_gemm"
for p in attention verify; do
  step "dev.$p" 180 "$dev/$dev_prefix$p"
done
grep -sh 'FAIL\|check(s) failed' "$logs"/dev.*.log >>"$OUT/summary.txt"

# ---------------------------------------------------------------- 9. compute-sanitizer, longer
if [ "$emu" != 1 ] && command -v compute-sanitizer >/dev/null; then
  # The attention kernel's shared memory (tiles, token trees' staged nodes), and the tree steps
  # of the Transformer (tree attention, rotary by depth, the path's K/V moved into place).
  step sanitizer.racecheck.attention 120 compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$tests/${test_prefix}kernels" "[attention]"
  step sanitizer.memcheck.trees 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$tests/${test_prefix}transformer" "[tree]"
fi

# ---------------------------------------------------------------- results
python3 - "$results" "$OUT/results.json" "$logs" <<'EOF'
import glob, json, os, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
benches = {}
for path in sorted(glob.glob(os.path.join(sys.argv[3], "bench.*.json"))):
    try:
        benches[os.path.basename(path)] = json.load(open(path))
    except ValueError:
        pass
logits = []
for path in sorted(glob.glob(os.path.join(sys.argv[3], "logits.*.compare.log"))):
    for line in open(path):
        if line.startswith("{"):
            logits.append(json.loads(line))
json.dump({"steps": steps, "failed": [s["step"] for s in steps if s["rc"] != 0],
           "logits": logits, "bench_cuda": benches}, open(sys.argv[2], "w"), indent=1)
EOF
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$logs"
echo "$failed failed step(s), $(($(date +%s) - started)) s" | tee -a "$OUT/summary.txt"
exit "$failed"
