#pragma once
// Included first by every kernel source (.cu). Under nvcc it is the real CUDA; compiled as host
// C++ (SPECDEC_CUDA_EMULATION) it is the project's emulator (cuda/emu/emu.hpp). Kernels use only
// what both provide, plus the few project macros below.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#if !defined(__CUDACC__)
#if !defined(SPECDEC_CUDA_EMULATION)
#error "CUDA sources compiled as host C++ need SPECDEC_CUDA_EMULATION (the cuda-emu targets set it)"
#endif
#include "emu/emu.hpp"
#endif

#include <cstddef>
#include <utility>

#include "specdec/common.hpp"

// SPECDEC_DYNAMIC_SHARED(T, name): `T* name` pointing at the block's dynamic shared memory (the
// third launch parameter, 16-byte aligned). The emulator fills it with 0xFF bytes (NaN) before
// every block, so reading shared memory that no thread wrote shows up in the results.
#if defined(__CUDACC__)
#define SPECDEC_DYNAMIC_SHARED(T, name)                                    \
  extern __shared__ __align__(16) unsigned char specdec_dynamic_shared_[]; \
  T* name = reinterpret_cast<T*>(specdec_dynamic_shared_)
#define SPECDEC_UNROLL _Pragma("unroll")
#define SPECDEC_DEVICE __device__ __forceinline__
#else
#define SPECDEC_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::specdec::emu::detail::this_block().dynamic_shared)
#define SPECDEC_UNROLL
#define SPECDEC_DEVICE inline
#endif

namespace specdec::cuda {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

/// `kernel<<<grid, block, dynamic_shared, stream>>>(args...)` in host code: the triple-chevron
/// launch under nvcc, the emulator's launch otherwise. Callers check cudaGetLastError() after it
/// (SPECDEC_CUDA_CHECK_LAUNCH in check.hpp).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_shared,
            cudaStream_t stream, Args&&... args) {
#if defined(__CUDACC__)
  kernel<<<grid, block, dynamic_shared, stream>>>(std::forward<Args>(args)...);
#else
  ::specdec::emu::launch(kernel, grid, block, dynamic_shared, stream, std::forward<Args>(args)...);
#endif
}

/// Lets `kernel` use up to `bytes` of dynamic shared memory (above the default 48 KiB).
template <class... Params>
cudaError_t set_max_dynamic_shared(void (*kernel)(Params...), std::size_t bytes) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

/// min / max that read the same in device code, host code and the emulator.
template <class T>
SPECDEC_HD constexpr T min_of(T a, T b) {
  return b < a ? b : a;
}
template <class T>
SPECDEC_HD constexpr T max_of(T a, T b) {
  return a < b ? b : a;
}

/// ceil(a / b) for positive integers.
template <class T>
SPECDEC_HD constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace specdec::cuda
