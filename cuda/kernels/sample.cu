// Draft-token sampling (see sampling.hpp): one block per row processes the logits into q (written
// out: the verifier needs it) and draws the token from q with the core's inverse CDF.
#include "common/check.hpp"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

namespace {

__global__ void sample_kernel(const float* logits, int vocab, sampling::SamplingParams params,
                              std::uint64_t seed, std::uint64_t stream_base, std::uint64_t counter,
                              float* q, token_t* tokens, int* bad_logit) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const std::size_t row = blockIdx.x;
  float* qr = q + row * vocab;
  const auto status = sampling_device::process_row(logits + row * vocab, vocab, params, qr);
  token_t token = -1;
  if (status.bad_logit < 0) {
    if (params.temperature <= 0.0f) {  // params.greedy(), which is host-only constexpr
      token = static_cast<token_t>(sampling_device::row_argmax(qr, vocab).index);
    } else {
      const float u = sampling::philox_uniform(seed, stream_base + row, counter);
      token = sampling_device::sample_plain_row(qr, vocab, u, static_cast<int>(row), sums).next;
    }
  }
  if (threadIdx.x == 0) {
    tokens[row] = token;
    bad_logit[row] = status.bad_logit;
  }
}

}  // namespace

void sample_rows(const float* logits, int rows, int vocab, const sampling::SamplingParams& params,
                 std::uint64_t seed, std::uint64_t stream_base, std::uint64_t counter, float* q,
                 token_t* tokens, int* bad_logit, cudaStream_t stream, int threads) {
  sampling::validate(params);
  if (rows <= 0) return;
  if (vocab <= 0) throw Error("sample_rows: vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error("sample_rows: bad block size");
  const std::size_t smem =
      3 * static_cast<std::size_t>(sampling_device::scan_blocks(vocab)) * sizeof(float);
  launch(sample_kernel, dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)),
         smem, stream, logits, vocab, params, seed, stream_base, counter, q, tokens, bad_logit);
  SPECDEC_CUDA_CHECK_LAUNCH("sample_kernel");
}

}  // namespace specdec::cuda::kernels
