// Logits -> processed distributions (see sampling.hpp): one block per row, the whole of
// sampling_device::process_row (temperature, exact radix-select top-k, bisection top-p, min-p,
// renormalisation) without sorting the vocabulary.
#include "common/check.hpp"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

__global__ void process_logits_kernel(const float* logits, int vocab,
                                      sampling::SamplingParams params, float* probs,
                                      int* bad_logit) {
  const std::size_t row = blockIdx.x;
  const auto status =
      sampling_device::process_row(logits + row * vocab, vocab, params, probs + row * vocab);
  if (threadIdx.x == 0) bad_logit[row] = status.bad_logit;
}

}  // namespace

void process_logits(const float* logits, int rows, int vocab,
                    const sampling::SamplingParams& params, float* probs, int* bad_logit,
                    cudaStream_t stream, int threads) {
  sampling::validate(params);
  if (rows <= 0) return;
  if (vocab <= 0) throw Error("process_logits: vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error("process_logits: bad block size");
  launch(process_logits_kernel, dim3(static_cast<unsigned>(rows)),
         dim3(static_cast<unsigned>(threads)), 0, stream, logits, vocab, params, probs, bad_logit);
  SPECDEC_CUDA_CHECK_LAUNCH("process_logits_kernel");
}

}  // namespace specdec::cuda::kernels
