// Test kernels for cuda/common/reduce.cuh. Compiled by nvcc for the GPU tests and as host C++
// for the emulated ones.
#include "common/check.hpp"
#include "common/reduce.cuh"
#include "reduce_kernels.hpp"

namespace specdec::test::reduce {

namespace {

using cuda::ArgMax;

__global__ void block_reductions_kernel(const float* in, int n, float* sum, float* max,
                                        int* argmax) {
  float s = 0.0f;
  float m = -INFINITY;
  ArgMax a{-INFINITY, 0x7fffffff};
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
    s += in[i];
    m = fmaxf(m, in[i]);
    a = cuda::ArgMaxOp{}(a, ArgMax{in[i], i});
  }
  s = cuda::block_sum(s);
  m = cuda::block_max(m);
  a = cuda::block_argmax(a);
  sum[threadIdx.x] = s;
  max[threadIdx.x] = m;
  argmax[threadIdx.x] = a.index;
}

__global__ void block_scan_kernel(const float* in, float* inclusive, float* exclusive,
                                  float* total) {
  const auto r = cuda::block_scan(in[threadIdx.x], cuda::SumOp{}, 0.0f);
  inclusive[threadIdx.x] = r.inclusive;
  exclusive[threadIdx.x] = r.exclusive;
  total[threadIdx.x] = r.total;
}

template <int N, int W>
__global__ void warp_sums_kernel(const float* in, float* scattered, float* plain) {
  const int lane = cuda::lane_id();
  float v[N];
  for (int s = 0; s < N; ++s) v[s] = in[lane * N + s];
  for (int s = 0; s < N; ++s) plain[lane * N + s] = cuda::warp_sum<W>(v[s]);
  scattered[lane] = cuda::warp_sum_scatter<N, W>(v);
}

template <int W>
__global__ void warp_group_sums_kernel(const float* in, float* out) {
  out[threadIdx.x] = cuda::warp_sum<W>(in[threadIdx.x]);
}

}  // namespace

void block_reductions(const float* in, int n, int threads, float* sum, float* max, int* argmax) {
  cuda::launch(block_reductions_kernel, dim3(1), dim3(static_cast<unsigned>(threads)), 0, nullptr,
               in, n, sum, max, argmax);
  SPECDEC_CUDA_CHECK_LAUNCH("block_reductions_kernel");
}

void block_scan(const float* in, int threads, float* inclusive, float* exclusive, float* total) {
  cuda::launch(block_scan_kernel, dim3(1), dim3(static_cast<unsigned>(threads)), 0, nullptr, in,
               inclusive, exclusive, total);
  SPECDEC_CUDA_CHECK_LAUNCH("block_scan_kernel");
}

void warp_sums(const float* in, int slots, int width, float* scattered, float* plain) {
  auto run = [&](auto kernel) {
    cuda::launch(kernel, dim3(1), dim3(32), 0, nullptr, in, scattered, plain);
  };
  const int key = slots * 100 + width;
  switch (key) {
    case 132:
      run(warp_sums_kernel<1, 32>);
      break;
    case 232:
      run(warp_sums_kernel<2, 32>);
      break;
    case 432:
      run(warp_sums_kernel<4, 32>);
      break;
    case 832:
      run(warp_sums_kernel<8, 32>);
      break;
    case 1632:
      run(warp_sums_kernel<16, 32>);
      break;
    case 3232:
      run(warp_sums_kernel<32, 32>);
      break;
    case 116:
      run(warp_sums_kernel<1, 16>);
      break;
    case 216:
      run(warp_sums_kernel<2, 16>);
      break;
    case 416:
      run(warp_sums_kernel<4, 16>);
      break;
    case 816:
      run(warp_sums_kernel<8, 16>);
      break;
    case 1616:
      run(warp_sums_kernel<16, 16>);
      break;
    default:
      throw Error("warp_sums: unsupported (slots, width)");
  }
  SPECDEC_CUDA_CHECK_LAUNCH("warp_sums_kernel");
}

void warp_group_sums(const float* in, int width, float* out) {
  auto run = [&](auto kernel) { cuda::launch(kernel, dim3(1), dim3(32), 0, nullptr, in, out); };
  switch (width) {
    case 1:
      run(warp_group_sums_kernel<1>);
      break;
    case 2:
      run(warp_group_sums_kernel<2>);
      break;
    case 4:
      run(warp_group_sums_kernel<4>);
      break;
    case 8:
      run(warp_group_sums_kernel<8>);
      break;
    case 16:
      run(warp_group_sums_kernel<16>);
      break;
    case 32:
      run(warp_group_sums_kernel<32>);
      break;
    default:
      throw Error("warp_group_sums: width must be a power of two <= 32");
  }
  SPECDEC_CUDA_CHECK_LAUNCH("warp_group_sums_kernel");
}

}  // namespace specdec::test::reduce
