// Draft-token sampling (see sampling.hpp): one block per row processes the logits into q (written
// out: the verifier needs it) and draws the token from q with the core's inverse CDF.
#include "common/check.hpp"
#include "common/round_args.cuh"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

/// What one block's sampling of a row gives.
struct RowSample {
  token_t token;  ///< -1 when the row has a NaN / infinite logit
  int bad_logit;  ///< index of the first such logit, or -1
};

/// Processes the row `lr` into `qr` and draws a token with the uniform at (a.seed, stream,
/// a.counter) (greedy: the argmax). All threads call it; the result is the same in every thread.
SPECDEC_DEVICE RowSample sample_one(const float* lr, int vocab, const RoundArgs& a,
                                    std::uint64_t stream, float* qr, int row, float* sums) {
  const auto status = sampling_device::process_row(lr, vocab, a.params, qr);
  if (status.bad_logit >= 0) return RowSample{-1, status.bad_logit};
  if (a.params.temperature < sampling::kMinTemperature) {  // params.greedy() (host-only)
    return RowSample{static_cast<token_t>(sampling_device::row_argmax(qr, vocab).index), -1};
  }
  const float u = sampling::philox_uniform(a.seed, stream, a.counter);
  return RowSample{sampling_device::sample_plain_row(qr, vocab, u, row, sums).next, -1};
}

// Args: ImmediateArgs (launched directly) or DeviceArgs (read from device memory; graphs).
template <class Args>
__global__ void sample_kernel(const float* logits, int vocab, Args args, float* q, token_t* tokens,
                              int* bad_logit) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const RoundArgs a = args.get();
  const std::size_t row = blockIdx.x;
  const RowSample r = sample_one(logits + row * vocab, vocab, a, a.stream + row, q + row * vocab,
                                 static_cast<int>(row), sums);
  if (threadIdx.x == 0) {
    tokens[row] = r.token;
    bad_logit[row] = r.bad_logit;
  }
}

__global__ void draft_sample_kernel(const float* logits, int vocab, SamplerRound* round, float* q,
                                    token_t* tokens, int* bad_logit, float* bad_value) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const int slot = round->slot;  // every thread reads it before the first barrier
  RoundArgs a = round->draft;
  a.counter += static_cast<std::uint64_t>(slot);
  const RowSample r = sample_one(logits, vocab, a, a.stream,
                                 q + static_cast<std::size_t>(slot) * vocab, slot, sums);
  __syncthreads();  // every thread has read round->slot before thread 0 advances it
  if (threadIdx.x == 0) {
    tokens[slot] = r.token;
    bad_logit[slot] = r.bad_logit;
    bad_value[slot] = r.bad_logit >= 0 ? logits[r.bad_logit] : 0.0f;
    round->slot = slot + 1;
  }
}

void check_shape(int vocab, int threads) {
  sampling_device::check_sampling_launch("sample_rows", vocab, threads);
}

}  // namespace

void sample_rows(const float* logits, int rows, int vocab, const sampling::SamplingParams& params,
                 std::uint64_t seed, std::uint64_t stream_base, std::uint64_t counter, float* q,
                 token_t* tokens, int* bad_logit, cudaStream_t stream, int threads) {
  sampling::validate(params);
  if (rows <= 0) return;
  check_shape(vocab, threads);
  launch(sample_kernel<ImmediateArgs>, dim3(static_cast<unsigned>(rows)),
         dim3(static_cast<unsigned>(threads)), sampling_device::row_sampler_shared_bytes(vocab),
         stream, logits, vocab, ImmediateArgs{{params, seed, stream_base, counter}}, q, tokens,
         bad_logit);
  SPECDEC_CUDA_CHECK_LAUNCH("sample_kernel");
}

void draft_sample(const float* logits, int vocab, SamplerRound* round, float* q, token_t* tokens,
                  int* bad_logit, float* bad_value, cudaStream_t stream, int threads) {
  check_shape(vocab, threads);
  launch(draft_sample_kernel, dim3(1), dim3(static_cast<unsigned>(threads)),
         sampling_device::row_sampler_shared_bytes(vocab), stream, logits, vocab, round, q, tokens,
         bad_logit, bad_value);
  SPECDEC_CUDA_CHECK_LAUNCH("draft_sample_kernel");
}

}  // namespace specdec::cuda::kernels
