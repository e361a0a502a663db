#pragma once
// Speculative sampling on the device, for logits in device memory (cuda::Transformer::forward):
// draft tokens are drawn and target rows verified by the sampling kernels, so that per round
// only the drafted tokens (one int each), the accepted count and the next token cross between
// host and device. Decisions follow the sampling core's conventions exactly (docs/math.md):
//   draft(): q = processed(logits row), token = inverse-CDF sample of q with
//            philox_uniform(seed, stream, counter), as sample_from on the host (greedy: argmax);
//   verify(): p_0 ... p_k = processed(target rows), then verify_chain with the uniforms
//            (seed, stream 0, counter + 0 ... counter + k), as the host's verify_chain with
//            PhiloxStream(seed, 0, counter); greedy parameters verify against the raw logits'
//            argmax.
// Given the same processed distributions the host core makes the same decisions bit for bit
// (docs/cuda.md, section 7); the distributions themselves are computed on the device and differ
// from the host's process_logits by rounding.
//
// No CUDA header: the stream is passed as void* (a cudaStream_t, e.g. Transformer::stream()).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec::cuda {

class DeviceSampler {
 public:
  /// Buffers for rows of `vocab` entries and up to `max_k` drafted tokens per round.
  DeviceSampler(std::size_t vocab, std::size_t max_k, void* stream);
  ~DeviceSampler();
  DeviceSampler(DeviceSampler&&) noexcept;
  DeviceSampler& operator=(DeviceSampler&&) noexcept;
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  /// Draws drafted token number `slot` (0 <= slot < max_k) from row `row` of the draft's device
  /// logits and keeps its processed distribution q_slot for verify(). Throws specdec::Error on a
  /// NaN / infinite logit or bad arguments.
  token_t draft(const LogitsView& logits, std::size_t row, std::size_t slot,
                const sampling::SamplingParams& params, std::uint64_t seed, std::uint64_t stream,
                std::uint64_t counter);

  /// Verifies `drafted` (k tokens, q_0 ... q_(k-1) from draft()) against the k + 1 rows of the
  /// target's device logits. Uses the uniforms (seed, stream 0) at counter ... counter + k.
  /// Throws specdec::Error as the host's verify_chain does.
  sampling::VerifyResult verify(const LogitsView& target, std::span<const token_t> drafted,
                                const sampling::SamplingParams& params, std::uint64_t seed,
                                std::uint64_t counter);

  /// Copies of the distributions the last calls used (k rows of q, k + 1 rows of p; for tests
  /// and diagnostics). p is empty after a greedy verify (it verifies the logits directly).
  [[nodiscard]] std::vector<float> q_rows(std::size_t k) const;
  [[nodiscard]] std::vector<float> p_rows(std::size_t k) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::cuda
