#!/usr/bin/env bash
# tools/gpu_bundle.sh: builds what tools/gpu_check.sh runs on a GPU machine and gathers it in
# .gpu/ (git-ignored), the folder to carry there. That machine has the CUDA toolkit (nvcc,
# cudart, cuBLAS) and a driver, but none of the project's Debian packages and no network.
#
#     tools/gpu_bundle.sh [CUDA_ARCH]      (default 90: H100 / H200)
#
#   build/gpu        Release, CUDA code for CUDA_ARCH only, the emulated programs as well (so
#                    that SPECDEC_GPU_CHECK_EMU=1 tools/gpu_check.sh can rehearse the flow here)
#   .gpu/bundle.tar.xz, which gpu_check.sh unpacks into .gpu/ there:
#     bin            the programs, stripped
#     lib            the shared libraries they need beyond the C and C++ runtimes and the CUDA
#                    toolkit's (ldd): fmt, OpenSSL and what those need
#     shared-models/tinyllama-pair   the trained pair (the tests find it there: the build's
#                    SPECDEC_SHARED_MODELS)
#     root           the source tree the binaries were built from (gpu_check.sh links it to the
#                    tree it runs in, for the paths the tests bake in)
# Carry .gpu (the device tool's `carry`).
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

# Staged in build/gpu-bundle, then packed into .gpu/bundle.tar.xz: the working tree that travels
# to the GPU machine is limited (64 MiB, the repository included), and xz halves the programs.
stage=build/gpu-bundle
rm -rf "$stage" .gpu
mkdir -p "$stage/bin" "$stage/lib" "$stage/shared-models/tinyllama-pair" .gpu
find build/gpu -type f -perm -u+x \( -name specdec -o -name specdec_bench_cuda -o \
  -name make_random_gguf -o -name 'cuda_gpu_*' -o -name 'cuda_dev_*' \) \
  -exec cp {} "$stage/bin/" \;
strip "$stage"/bin/*

# Shared libraries: everything ldd resolves except the C/C++ runtime (any Linux has a newer one)
# and CUDA's (the toolkit there has its own, matching its driver).
for exe in "$stage"/bin/*; do
  ldd "$exe" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | ld-linux* | libpthread.so* | libdl.so* | \
      librt.so* | libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so*) ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done

pair=../shared/models/tinyllama-pair
for f in target-f32.gguf draft-f32.gguf tokenizer.model eval-prompts.jsonl greedy-reference.jsonl; do
  cp "$pair/$f" "$stage/shared-models/tinyllama-pair/"
done
echo "$PWD" >"$stage/root"
tar -C "$stage" -cf - bin lib shared-models root | xz -T0 -9 >.gpu/bundle.tar.xz
du -sh "$stage"/* .gpu/bundle.tar.xz
echo "tracked files: $(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1) bytes (they travel too)"
