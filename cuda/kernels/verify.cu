// Fused chain verification for B sequences (see sampling.hpp): one block per sequence.
//
// The acceptance tests are k scalar comparisons; every thread evaluates them (redundantly, so
// that no broadcast is needed and control flow stays uniform for the barriers that follow). Only
// the row that is sampled from (the residual at the first rejection, or the bonus row) is read in
// full: its lane-order block sums are computed by the whole block (groups of 8 threads per
// 256-entry block), and thread 0 runs the serial double-precision part of the core's inverse CDF.
// So a call reads k entries of p and q plus one or two rows: the same work as the host, in
// parallel. Greedy verification takes a block-wide argmax per row instead.
#include <vector>

#include "common/check.hpp"
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

// kOneHot: q is a point mass at each drafted token (verify_chain_onehot_row), else q rows are read.
template <bool kOneHot>
__global__ void verify_kernel(const float* p, const float* q, const token_t* draft, int k,
                              int vocab, std::uint64_t seed, std::uint64_t counter,
                              std::int32_t* accepted, token_t* emitted, VerifyOutcome* outcome) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const std::size_t b = blockIdx.x;
  const std::size_t V = static_cast<std::size_t>(vocab);
  const float* pb = p + b * (k + 1) * V;
  const float* qb = kOneHot ? nullptr : q + b * k * V;
  const token_t* db = draft + b * k;
  const sampling::PhiloxUniforms uniform{seed, b, counter};

  VerifyOutcome out;
  bool failed = !sampling::check_draft(db, static_cast<std::size_t>(k), V, out);
  int rejected = k;
  for (int i = 0; i < k && !failed; ++i) {
    const auto x = static_cast<std::size_t>(db[i]);
    const float p_x = pb[i * V + x];
    if (!sampling::detail::finite(p_x) || !(p_x >= 0.0f)) {
      out = sampling::detail::fail(sampling::VerifyError::p_value_bad, static_cast<std::size_t>(i),
                                   p_x);
      failed = true;
      break;
    }
    float q_x = 1.0f;
    if constexpr (!kOneHot) {
      q_x = qb[i * V + x];
      if (!sampling::detail::finite(q_x) || !(q_x >= 0.0f)) {
        out = sampling::detail::fail(sampling::VerifyError::q_value_bad,
                                     static_cast<std::size_t>(i), q_x);
        failed = true;
        break;
      }
    }
    if (sampling::accept_draft(uniform(static_cast<std::size_t>(i)), p_x, q_x)) continue;
    rejected = i;
    break;
  }
  if (!failed) {  // uniform over the block: every thread took the same decisions
    const float u = uniform(static_cast<std::size_t>(k));
    if (rejected < k) {
      const float* pr = pb + rejected * V;
      if constexpr (kOneHot) {
        out = sampling_device::sample_exclude_one_row(pr, vocab, db[rejected], u, rejected, sums);
      } else {
        out = sampling_device::sample_residual_row(pr, qb + rejected * V, vocab, u, rejected, sums);
      }
    } else {
      out = sampling_device::sample_plain_row(pb + k * V, vocab, u, k, sums);
    }
    out.accepted = static_cast<std::size_t>(rejected);
  }
  store(out, db, k, accepted, emitted, outcome);
}

__global__ void verify_greedy_kernel(const float* rows, bool logits, const token_t* draft, int k,
                                     int vocab, std::int32_t* accepted, token_t* emitted,
                                     VerifyOutcome* outcome) {
  const std::size_t b = blockIdx.x;
  const std::size_t V = static_cast<std::size_t>(vocab);
  const token_t* db = draft + b * k;
  VerifyOutcome out;
  if (sampling::check_draft(db, static_cast<std::size_t>(k), V, out)) {
    for (int i = 0; i <= k; ++i) {
      const float* row = rows + (b * (k + 1) + i) * V;
      // The first entry the host's check would reject: NaN / infinite (and, for p, negative).
      int bad = 0x7fffffff;
      for (int j = static_cast<int>(threadIdx.x); j < vocab; j += static_cast<int>(blockDim.x)) {
        const float v = row[j];
        if ((!sampling::detail::finite(v) || (!logits && !(v >= 0.0f))) && j < bad) bad = j;
      }
      bad = block_all_reduce(bad, MinOp{});
      if (bad != 0x7fffffff) {
        out = sampling::detail::fail(sampling::VerifyError::p_row_bad, static_cast<std::size_t>(i),
                                     row[bad]);
        break;
      }
      const auto best = static_cast<token_t>(sampling_device::row_argmax(row, vocab).index);
      if (i == k || db[i] != best) {
        out.accepted = static_cast<std::size_t>(i);
        out.next = best;
        break;
      }
    }
  }
  store(out, db, k, accepted, emitted, outcome);
}

void check_launch_shape(const char* what, int batch, int k, int vocab, int threads) {
  if (batch < 0 || k < 0) throw Error(std::string(what) + ": negative batch or k");
  if (vocab <= 0) throw Error(std::string(what) + ": vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error(std::string(what) + ": bad block size");
}

}  // namespace

void verify_chain(const float* p, const float* q, const token_t* draft, int batch, int k, int vocab,
                  std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                  token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                  int threads) {
  check_launch_shape("verify_chain", batch, k, vocab, threads);
  if (batch == 0) return;
  const std::size_t smem =
      3 * static_cast<std::size_t>(sampling_device::scan_blocks(vocab)) * sizeof(float);
  launch(verify_kernel<false>, dim3(static_cast<unsigned>(batch)),
         dim3(static_cast<unsigned>(threads)), smem, stream, p, q, draft, k, vocab, seed, counter,
         accepted, emitted, outcome);
  SPECDEC_CUDA_CHECK_LAUNCH("verify_kernel");
}

void verify_chain_onehot(const float* p, const token_t* draft, int batch, int k, int vocab,
                         std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                         token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                         int threads) {
  check_launch_shape("verify_chain_onehot", batch, k, vocab, threads);
  if (batch == 0) return;
  const std::size_t smem =
      3 * static_cast<std::size_t>(sampling_device::scan_blocks(vocab)) * sizeof(float);
  launch(verify_kernel<true>, dim3(static_cast<unsigned>(batch)),
         dim3(static_cast<unsigned>(threads)), smem, stream, p, static_cast<const float*>(nullptr),
         draft, k, vocab, seed, counter, accepted, emitted, outcome);
  SPECDEC_CUDA_CHECK_LAUNCH("verify_kernel (one-hot)");
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
