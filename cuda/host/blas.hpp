#pragma once
// The one cuBLAS call the backend makes, behind a thin layer: with nvcc it is cublasGemmEx, in the
// emulation build a plain CPU loop with the same contract (the emulator has no cuBLAS).

#include <cuda_runtime.h>

#include "kernels/types.hpp"

namespace specdec::cuda {

class Blas {
 public:
  Blas();
  // Not trivially destructible in the cuBLAS build (it destroys its handle); the emulated build's
  // defaulted destructor is what clang-tidy sees.
  ~Blas();  // NOLINT(performance-trivially-destructible)
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  /// y[n][out] = x[n][in] W[out][in]^T: W and x of `type` (F16 or BF16), y f32 with row t at
  /// y + t * ldy (ldy >= out), f32 accumulation (device pointers). Enqueued on `stream`.
  void gemm_xwT(DType type, const void* w, const void* x, float* y, int n, int out, int in, int ldy,
                cudaStream_t stream);

 private:
  void* handle_ = nullptr;  // cublasHandle_t with nvcc
};

}  // namespace specdec::cuda
