#pragma once
// RMSNorm fused with the residual add of the previous sub-layer:
//   h[t, :] += delta[t, :]                       (skipped when delta is null)
//   out[t, :] = h[t, :] / sqrt(mean(h[t, :]^2) + eps) * weight[:]

#include <cuda_runtime.h>

namespace specdec::cuda::kernels {

/// h, delta, out: [n, dim] f32; weight: [dim] f32 (device pointers). out may not alias h.
/// `threads`: block size (a multiple of 32); one block per row.
void rmsnorm_residual(float* h, const float* delta, const float* weight, float eps, int n, int dim,
                      float* out, int threads, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
