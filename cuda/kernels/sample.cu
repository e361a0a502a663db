// Draft-token sampling (see sampling.hpp): one block per row processes the logits into q (written
// out: the verifier needs it) and draws the token from q with the core's inverse CDF.
#include "common/check.hpp"
#include "common/round_args.cuh"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

// Args: ImmediateArgs (launched directly) or DeviceArgs (read from device memory; graphs).
template <class Args>
__global__ void sample_kernel(const float* logits, int vocab, Args args, float* q, token_t* tokens,
                              int* bad_logit, float* bad_value) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const RoundArgs a = args.get();
  const std::size_t row = blockIdx.x;
  float* qr = q + row * vocab;
  const float* lr = logits + row * vocab;
  const auto status = sampling_device::process_row(lr, vocab, a.params, qr);
  token_t token = -1;
  if (status.bad_logit < 0) {
    if (a.params.temperature <= 0.0f) {  // params.greedy(), which is host-only constexpr
      token = static_cast<token_t>(sampling_device::row_argmax(qr, vocab).index);
    } else {
      const float u = sampling::philox_uniform(a.seed, a.stream + row, a.counter);
      token = sampling_device::sample_plain_row(qr, vocab, u, static_cast<int>(row), sums).next;
    }
  }
  if (threadIdx.x == 0) {
    tokens[row] = token;
    bad_logit[row] = status.bad_logit;
    if (bad_value != nullptr) bad_value[row] = status.bad_logit >= 0 ? lr[status.bad_logit] : 0.0f;
  }
}

template <class Args>
void launch_sample(const float* logits, int rows, int vocab, Args args, float* q, token_t* tokens,
                   int* bad_logit, float* bad_value, cudaStream_t stream, int threads) {
  if (rows <= 0) return;
  if (vocab <= 0) throw Error("sample_rows: vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error("sample_rows: bad block size");
  const std::size_t smem =
      3 * static_cast<std::size_t>(sampling_device::scan_blocks(vocab)) * sizeof(float);
  launch(sample_kernel<Args>, dim3(static_cast<unsigned>(rows)),
         dim3(static_cast<unsigned>(threads)), smem, stream, logits, vocab, args, q, tokens,
         bad_logit, bad_value);
  SPECDEC_CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace

void sample_rows(const float* logits, int rows, int vocab, const sampling::SamplingParams& params,
                 std::uint64_t seed, std::uint64_t stream_base, std::uint64_t counter, float* q,
                 token_t* tokens, int* bad_logit, cudaStream_t stream, int threads) {
  sampling::validate(params);
  launch_sample(logits, rows, vocab, ImmediateArgs{{params, seed, stream_base, counter}}, q, tokens,
                bad_logit, nullptr, stream, threads);
}

void sample_rows(const float* logits, int rows, int vocab, const RoundArgs* args,
                 std::uint64_t counter_offset, float* q, token_t* tokens, int* bad_logit,
                 float* bad_value, cudaStream_t stream, int threads) {
  launch_sample(logits, rows, vocab, DeviceArgs{args, counter_offset}, q, tokens, bad_logit,
                bad_value, stream, threads);
}

}  // namespace specdec::cuda::kernels
