#pragma once
// The one cuBLAS call the backend makes, behind a thin layer: with nvcc it is cublasGemmEx, in the
// emulation build a plain CPU loop with the same contract (the emulator has no cuBLAS).

#include <cuda_runtime.h>

#include "kernels/types.hpp"

namespace specdec::cuda {

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  /// y[n][out] = x[n][in] W[out][in]^T: W and x of `type` (16-bit), y f32, f32 accumulation
  /// (device pointers). Enqueued on `stream`.
  void gemm_xwT(WeightType type, const void* w, const void* x, float* y, int n, int out, int in,
                cudaStream_t stream);

 private:
  void* handle_ = nullptr;  // cublasHandle_t with nvcc
};

}  // namespace specdec::cuda
