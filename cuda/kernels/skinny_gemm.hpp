#pragma once
// The memory-bound matrix product of decode and verify steps: y = x W^T for n <= 16 rows of
// activations,
//   W: [out][in] f16 or bf16 (a Linear layer's weight), x: [n][in] f32, y: [n][out] f32.
// Each weight is read once from memory with 128-bit loads, products accumulate in f32.
//
// Batch invariance: y[t][r] is bitwise the same for any n (and any position of t in the batch),
// because the order of every floating-point operation that produces it depends only on `in`:
// lane l of the row's 16 lanes accumulates chunks l, l + 16, ... with fused multiply-adds in a
// fixed order, and the 16 partial sums are combined with the same butterfly tree whatever n is
// (cuda/common/reduce.cuh, warp_sum_scatter).

#include <cuda_runtime.h>

#include "kernels/types.hpp"

namespace specdec::cuda::kernels {

inline constexpr int kSkinnyMaxTokens = 16;

/// y = x W^T for 1 <= n <= 16 (device pointers). `warps` per block, two rows per warp; 4 is the
/// GPU default, the emulated tests also run 1 and 2.
void skinny_gemm(WeightType type, const void* w, const float* x, float* y, int n, int out, int in,
                 cudaStream_t stream, int warps = 4);

}  // namespace specdec::cuda::kernels
