// Fused chain verification for B sequences (see sampling.hpp): one block per sequence.
//
// Each block runs the sampling core's own verify loop (sampling::verify_loop, and
// sampling::verify_greedy_loop for greedy): the acceptance tests are k scalar comparisons that
// every thread evaluates (redundantly, so that no broadcast is needed and control flow stays
// uniform for the barriers that follow). Only the row that is sampled from (the residual at the
// first rejection, or the bonus row) is read in full, by the block-wide row sampler: its
// lane-order block sums are computed by the whole block (groups of 8 threads per 256-entry
// block), and thread 0 runs the core's serial inverse CDF on them. So a call reads k entries of
// p and q plus one or two rows: the same work as the host, in parallel. Greedy verification
// scans each row with a block-wide argmax instead.
#include <vector>

#include "common/check.hpp"
#include "common/round_args.cuh"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"
#include "specdec/sampling/batch.hpp"

namespace specdec::cuda::kernels {

namespace {

using sampling::VerifyOutcome;

SPECDEC_DEVICE void store(const VerifyOutcome& out, const token_t* draft, int k,
                          std::int32_t* accepted, token_t* emitted, VerifyOutcome* outcome) {
  if (threadIdx.x != 0) return;
  const std::size_t b = blockIdx.x;
  accepted[b] = static_cast<std::int32_t>(out.accepted);
  sampling::write_emitted(out, draft, static_cast<std::size_t>(k), emitted + b * (k + 1));
  outcome[b] = out;
}

// q == nullptr: point-mass proposals (verify_chain_onehot_row), else q rows are read.
template <class Args>
__global__ void verify_kernel(const float* p, const float* q, const token_t* draft, int k,
                              int vocab, Args args, std::int32_t* accepted, token_t* emitted,
                              VerifyOutcome* outcome) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const RoundArgs a = args.get();
  const std::size_t b = blockIdx.x;
  const std::size_t V = static_cast<std::size_t>(vocab);
  const std::size_t K = static_cast<std::size_t>(k);
  const token_t* db = draft + b * K;
  const sampling::PhiloxUniforms uniform{a.seed, a.stream + b, a.counter};
  const VerifyOutcome out =
      sampling::verify_loop(p + b * (K + 1) * V, q == nullptr ? nullptr : q + b * K * V, db, K, V,
                            uniform, sampling_device::BlockRowSampler{vocab, sums});
  store(out, db, k, accepted, emitted, outcome);
}

__global__ void verify_greedy_kernel(const float* rows, bool logits, const token_t* draft, int k,
                                     int vocab, std::int32_t* accepted, token_t* emitted,
                                     VerifyOutcome* outcome) {
  const std::size_t b = blockIdx.x;
  const std::size_t V = static_cast<std::size_t>(vocab);
  const std::size_t K = static_cast<std::size_t>(k);
  const token_t* db = draft + b * K;
  const VerifyOutcome out = sampling::verify_greedy_loop(
      rows + b * (K + 1) * V, db, K, V, sampling_device::BlockGreedyScan{vocab, logits});
  store(out, db, k, accepted, emitted, outcome);
}

void check_launch_shape(const char* what, int batch, int k, int vocab, int threads) {
  if (batch < 0 || k < 0) throw Error(std::string(what) + ": negative batch or k");
  sampling_device::check_sampling_launch(what, vocab, threads);
}

template <class Args>
void launch_verify(const char* what, const float* p, const float* q, const token_t* draft,
                   int batch, int k, int vocab, Args args, std::int32_t* accepted, token_t* emitted,
                   VerifyOutcome* outcome, cudaStream_t stream, int threads) {
  check_launch_shape(what, batch, k, vocab, threads);
  if (batch == 0) return;
  const std::size_t smem = sampling_device::row_sampler_shared_bytes(vocab);
  launch(verify_kernel<Args>, dim3(static_cast<unsigned>(batch)),
         dim3(static_cast<unsigned>(threads)), smem, stream, p, q, draft, k, vocab, args, accepted,
         emitted, outcome);
  SPECDEC_CUDA_CHECK_LAUNCH("verify_kernel");
}

}  // namespace

void verify_chain(const float* p, const float* q, const token_t* draft, int batch, int k, int vocab,
                  std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                  token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                  int threads) {
  launch_verify("verify_chain", p, q, draft, batch, k, vocab,
                ImmediateArgs{{sampling::SamplingParams{}, seed, 0, counter}}, accepted, emitted,
                outcome, stream, threads);
}

void verify_chain_onehot(const float* p, const token_t* draft, int batch, int k, int vocab,
                         std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                         token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                         int threads) {
  launch_verify("verify_chain_onehot", p, static_cast<const float*>(nullptr), draft, batch, k,
                vocab, ImmediateArgs{{sampling::SamplingParams{}, seed, 0, counter}}, accepted,
                emitted, outcome, stream, threads);
}

void verify_chain(const float* p, const float* q, const token_t* draft, int batch, int k, int vocab,
                  const RoundArgs* args, std::int32_t* accepted, token_t* emitted,
                  sampling::VerifyOutcome* outcome, cudaStream_t stream, int threads) {
  launch_verify(q != nullptr ? "verify_chain" : "verify_chain_onehot", p, q, draft, batch, k, vocab,
                DeviceArgs{args, 0}, accepted, emitted, outcome, stream, threads);
}

void verify_chain_greedy(const float* rows, bool rows_are_logits, const token_t* draft, int batch,
                         int k, int vocab, std::int32_t* accepted, token_t* emitted,
                         sampling::VerifyOutcome* outcome, cudaStream_t stream, int threads) {
  check_launch_shape("verify_chain_greedy", batch, k, vocab, threads);
  if (batch == 0) return;
  launch(verify_greedy_kernel, dim3(static_cast<unsigned>(batch)),
         dim3(static_cast<unsigned>(threads)), 0, stream, rows, rows_are_logits, draft, k, vocab,
         accepted, emitted, outcome);
  SPECDEC_CUDA_CHECK_LAUNCH("verify_greedy_kernel");
}

void throw_on_error(const sampling::VerifyOutcome* outcome, int batch, const char* what,
                    cudaStream_t stream) {
  if (batch <= 0) return;
  std::vector<sampling::VerifyOutcome> host(static_cast<std::size_t>(batch));
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(host.data(), outcome,
                                     host.size() * sizeof(sampling::VerifyOutcome),
                                     cudaMemcpyDeviceToHost, stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (std::size_t b = 0; b < host.size(); ++b)
    sampling::detail::throw_for_sequence(host[b], what, b);
}

}  // namespace specdec::cuda::kernels
