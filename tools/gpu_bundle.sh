#!/usr/bin/env bash
# tools/gpu_bundle.sh: builds what tools/gpu_check.sh runs on a GPU machine and gathers it in
# .gpu/ (git-ignored), the folder to carry there. That machine has the CUDA toolkit (nvcc,
# cudart, cuBLAS) and a driver, but none of the project's Debian packages and no network.
#
#     tools/gpu_bundle.sh [CUDA_ARCH]      (default 90: H100 / H200)
#
#   build/gpu        Release, CUDA code for CUDA_ARCH only, the emulated programs as well (so
#                    that SPECDEC_GPU_CHECK_EMU=1 tools/gpu_check.sh can rehearse the flow here)
#   .gpu/bin         the programs, stripped
#   .gpu/lib         the shared libraries they need beyond the C and C++ runtimes and the CUDA
#                    toolkit's (ldd): fmt, cpp-httplib and what those need
#   .gpu/shared-models/tinyllama-pair   the trained pair (the tests find it there: the build's
#                    SPECDEC_SHARED_MODELS)
#   .gpu/root        the source tree the binaries were built from (gpu_check.sh links it to the
#                    tree it runs in, for the paths the tests bake in)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${1:-90}
export PATH=$PATH:/usr/local/cuda/bin

cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DSPECDEC_WERROR=ON -DSPECDEC_SHARED_MODELS="$PWD/.gpu/shared-models"
programs=(specdec-cli specdec_bench_cuda make_random_gguf
  cuda_gpu_reduce cuda_gpu_kernels cuda_gpu_sampling cuda_gpu_transformer
  cuda_dev_skinny_gemm cuda_dev_attention cuda_dev_verify)
cmake --build build/gpu --target "${programs[@]}"

rm -rf .gpu/bin .gpu/lib
mkdir -p .gpu/bin .gpu/lib .gpu/shared-models/tinyllama-pair
find build/gpu -type f -perm -u+x \( -name specdec -o -name specdec_bench_cuda -o \
  -name make_random_gguf -o -name 'cuda_gpu_*' -o -name 'cuda_dev_*' \) \
  -exec cp {} .gpu/bin/ \;
strip .gpu/bin/*

# Shared libraries: everything ldd resolves except the C/C++ runtime (any Linux has a newer one)
# and CUDA's (the toolkit there has its own, matching its driver).
for exe in .gpu/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | ld-linux* | libpthread.so* | libdl.so* | \
      librt.so* | libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done

pair=../shared/models/tinyllama-pair
for f in target-f32.gguf draft-f32.gguf tokenizer.model eval-prompts.jsonl greedy-reference.jsonl; do
  cp "$pair/$f" .gpu/shared-models/tinyllama-pair/
done
echo "$PWD" >.gpu/root
du -sh .gpu/bin .gpu/lib .gpu/shared-models
ls .gpu/bin .gpu/lib
