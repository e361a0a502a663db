// Logits -> processed distributions (see sampling.hpp): one block per row, the whole of
// sampling_device::process_row (temperature, exact radix-select top-k, bisection top-p, min-p,
// renormalisation) without sorting the vocabulary.
#include "common/check.hpp"
#include "common/round_args.cuh"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

template <class Args>
__global__ void process_logits_kernel(const float* logits, int vocab, Args args, float* probs,
                                      int* bad_logit, float* bad_value) {
  const RoundArgs a = args.get();
  const std::size_t row = blockIdx.x;
  const float* lr = logits + row * vocab;
  const auto status = sampling_device::process_row(lr, vocab, a.params, probs + row * vocab);
  if (threadIdx.x == 0) {
    bad_logit[row] = status.bad_logit;
    if (bad_value != nullptr) bad_value[row] = status.bad_logit >= 0 ? lr[status.bad_logit] : 0.0f;
  }
}

template <class Args>
void launch_process(const float* logits, int rows, int vocab, Args args, float* probs,
                    int* bad_logit, float* bad_value, cudaStream_t stream, int threads) {
  if (rows <= 0) return;
  sampling_device::check_sampling_launch("process_logits", vocab, threads);
  launch(process_logits_kernel<Args>, dim3(static_cast<unsigned>(rows)),
         dim3(static_cast<unsigned>(threads)), 0, stream, logits, vocab, args, probs, bad_logit,
         bad_value);
  SPECDEC_CUDA_CHECK_LAUNCH("process_logits_kernel");
}

}  // namespace

void process_logits(const float* logits, int rows, int vocab,
                    const sampling::SamplingParams& params, float* probs, int* bad_logit,
                    cudaStream_t stream, int threads) {
  sampling::validate(params);
  launch_process(logits, rows, vocab, ImmediateArgs{{params, 0, 0, 0}}, probs, bad_logit, nullptr,
                 stream, threads);
}

void process_logits(const float* logits, int rows, int vocab, const RoundArgs* args, float* probs,
                    int* bad_logit, float* bad_value, cudaStream_t stream, int threads) {
  launch_process(logits, rows, vocab, DeviceArgs{args, 0}, probs, bad_logit, bad_value, stream,
                 threads);
}

}  // namespace specdec::cuda::kernels
