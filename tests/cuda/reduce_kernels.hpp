#pragma once
// Host entry points of the test kernels that exercise cuda/common/reduce.cuh (reduce_kernels.cu).
// All pointers are device pointers.

#include <cuda_runtime.h>

namespace specdec::test::reduce {

/// One block of `threads` threads reduces in[0, n): every thread writes its view of the block
/// sum, max and argmax to sum[t], max[t], argmax[t].
void block_reductions(const float* in, int n, int threads, float* sum, float* max, int* argmax);

/// One block, one value per thread: inclusive / exclusive prefix sums and the total per thread.
void block_scan(const float* in, int threads, float* inclusive, float* exclusive, float* total);

/// One warp: in is [32 lanes][slots]; scattered[l] = warp_sum_scatter<slots, width> in lane l,
/// plain[l * slots + s] = warp_sum<width>(in[.][s]) in lane l (width 32: slots 1 ... 32;
/// width 16: slots 1 ... 16).
void warp_sums(const float* in, int slots, int width, float* scattered, float* plain);

/// One warp: out[l] = warp_sum<width>(in[l]) (width in 1, 2, 4, ..., 32).
void warp_group_sums(const float* in, int width, float* out);

}  // namespace specdec::test::reduce
