// Row-wise argmax (see sampling.hpp): one block per row, a strided scan then block_argmax (the
// lowest index wins ties, as the host's argmax_row).
#include "common/check.hpp"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

__global__ void argmax_kernel(const float* x, int vocab, token_t* out) {
  const std::size_t row = blockIdx.x;
  const auto best = sampling_device::row_argmax(x + row * vocab, vocab);
  if (threadIdx.x == 0) out[row] = static_cast<token_t>(best.index);
}

}  // namespace

void argmax_rows(const float* x, int rows, int vocab, token_t* out, cudaStream_t stream,
                 int threads) {
  if (rows <= 0) return;
  sampling_device::check_sampling_launch("argmax_rows", vocab, threads);
  launch(argmax_kernel, dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0,
         stream, x, vocab, out);
  SPECDEC_CUDA_CHECK_LAUNCH("argmax_kernel");
}

}  // namespace specdec::cuda::kernels
