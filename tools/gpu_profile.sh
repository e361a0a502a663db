#!/usr/bin/env bash
# tools/gpu_profile.sh: where a CUDA forward step's time goes, kernel by kernel, on a GPU
# machine (docs/cuda.md, section 12.3). After tools/gpu_bundle.sh here, there:
#
#     OUT=/some/dir tools/gpu_profile.sh [SHAPE] [TYPE]     (default qwen2.5-1.5b q4_k_m)
#
# SPECDEC_PROFILE_TOKENS (default "1 12"): the step sizes profiled. ncu takes about 3 minutes of
# a device call for n = 1 on the 1.5B (some 12000 launches).
#
# Makes the random-weight model (make_random_gguf) unless it exists, then runs
# specdec_bench_cuda under Nsight Compute (ncu: Nsight Systems does not run on these machines)
# for steps of n = 1 token (decode) and n = 12 (a verify step), collecting one metric per kernel
# launch, gpu__time_duration (each kernel node of the CUDA graphs is timed as its own launch,
# serialised: no overlap between kernels is counted, which a graph replay barely has anyway).
# --clock-control none leaves the clocks as they are (the device README's method); ncu's default
# cache control flushes the caches before each launch, so every kernel starts cold (the weights
# are cold in a real step too, but the activations and norms would be in L2). Writes
# $OUT/profile-n<N>.csv (ncu's rows) and $OUT/profile-n<N>.txt: the launches grouped by kernel,
# grid and block, with count, mean and total microseconds, the largest first. The prefill of the
# 128-token context shows as groups of 28 launches (one per layer) beside the steps' hundreds.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-/tmp/gpu-profile}
shape=${1:-qwen2.5-1.5b}
type=${2:-q4_k_m}
mkdir -p "$OUT"
[ -d .gpu/bin ] || tar -C .gpu -xJf .gpu/bundle.tar.xz || exit 100
built_in=$(cat .gpu/root)
if [ "$built_in" != "$root" ] && [ ! -e "$built_in" ]; then
  mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in"
fi
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
done
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
[ -n "$ncu" ] || {
  echo "gpu_profile: no ncu" >&2
  exit 1
}
models=${SPECDEC_GPU_MODELS:-/tmp/specdec-gpu-models}
mkdir -p "$models"
model=$models/$shape-$type.gguf
if [ ! -s "$model" ]; then
  .gpu/bin/make_random_gguf --shape "$shape" --type "$type" --out "$model.part" && mv "$model.part" "$model"
fi

for n in ${SPECDEC_PROFILE_TOKENS:-1 12}; do
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    .gpu/bin/specdec_bench_cuda "$model" --tokens "$n" --repeats 3 --context 128 --round-k 0 \
    --round-tokens 4 --prefill 0 >"$OUT/profile-n$n.csv" 2>"$OUT/profile-n$n.err"
  echo "ncu exit $? for n = $n" >>"$OUT/profile-n$n.err"
  python3 - "$OUT/profile-n$n.csv" "$n" "$shape-$type" >"$OUT/profile-n$n.txt" <<'EOF'
import collections, csv, sys
path, n, model = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l for l in open(path) if l.startswith('"')]
groups = collections.defaultdict(list)
for row in csv.DictReader(lines):
    if row.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = row["Kernel Name"]
    key = (name[:110], row.get("Grid Size", ""), row.get("Block Size", ""))
    groups[key].append(float(row["Metric Value"].replace(",", "")) / 1e3)  # ns -> us (1,234)
total = sum(sum(v) for v in groups.values())
print(f"{model}, steps of n = {n}: {sum(len(v) for v in groups.values())} launches, "
      f"{total:.0f} us in all (specdec_bench_cuda --tokens {n} --repeats 3 --context 128)")
print(f"{'count':>6} {'mean us':>9} {'total us':>10} {'share':>6}  grid / block  kernel")
for (name, grid, block), v in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
    s = sum(v)
    print(f"{len(v):6d} {s / len(v):9.2f} {s:10.0f} {s / total:6.1%}  {grid} / {block}  {name}")
EOF
done
