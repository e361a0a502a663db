// RMSNorm + residual (see rmsnorm.hpp). One block per row: each thread adds the residual for
// its strided elements, the block sums the squares (block_sum, deterministic), then each thread
// scales its elements. The second pass re-reads h from global memory: the block's own writes,
// from L1/L2. Activations are a few KB per row, so the kernel is latency-bound, not bandwidth.
#include "common/check.hpp"
#include "common/reduce.cuh"
#include "kernels/rmsnorm.hpp"

namespace specdec::cuda::kernels {

namespace {

__global__ void rmsnorm_residual_kernel(float* h, const float* delta, const float* weight,
                                        float eps, int dim, float* out) {
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * dim;
  float* row = h + base;
  float sum_sq = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x)) {
    float v = row[i];
    if (delta != nullptr) {
      v += delta[base + i];
      row[i] = v;
    }
    sum_sq = fmaf(v, v, sum_sq);
  }
  sum_sq = block_sum(sum_sq);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < dim; i += static_cast<int>(blockDim.x)) {
    out[base + i] = row[i] * inv_rms * weight[i];
  }
}

}  // namespace

void rmsnorm_residual(float* h, const float* delta, const float* weight, float eps, int n, int dim,
                      float* out, int threads, cudaStream_t stream) {
  if (n <= 0) return;
  if (threads <= 0 || threads % kWarpSize != 0 || threads > 1024) {
    throw Error("rmsnorm_residual: threads must be a positive multiple of 32, at most 1024");
  }
  launch(rmsnorm_residual_kernel, dim3(static_cast<unsigned>(n)),
         dim3(static_cast<unsigned>(threads)), 0, stream, h, delta, weight, eps, dim, out);
  SPECDEC_CUDA_CHECK_LAUNCH("rmsnorm_residual_kernel");
}

}  // namespace specdec::cuda::kernels
