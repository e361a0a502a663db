#pragma once
// Batched verification: B independent sequences in one call, in the memory layout of
// FlashInfer's chain_speculative_sampling (and of specdec's CUDA kernel):
//
//   q         B x k x V      draft distributions        (sequence b: rows q[b, 0 .. k-1])
//   draft     B x k          drafted tokens
//   p         B x (k+1) x V  target distributions       (sequence b: rows p[b, 0 .. k])
//   accepted  B              n_b, the number of drafted tokens kept by sequence b
//   emitted   B x (k+1)      x_0 ... x_(n_b - 1), then next_b, then -1 up to the row's end
//
// Sequence b draws its uniforms from stream b of the shared seed, at counters
// counter + 0 ... counter + k (the convention of verify.hpp); the caller advances its counter
// by k + 1 per call. A batch of one with stream 0 is exactly verify_chain with
// PhiloxStream(seed, 0, counter).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "specdec/common.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec::sampling {

/// Writes one sequence's emitted row (k + 1 entries) for an outcome.
SPECDEC_HD inline void write_emitted(const VerifyOutcome& outcome, const token_t* draft,
                                     std::size_t k, token_t* emitted) {
  for (std::size_t i = 0; i <= k; ++i) {
    emitted[i] = i < outcome.accepted ? draft[i] : (i == outcome.accepted ? outcome.next : -1);
  }
}

namespace detail {

/// Checks the shapes shared by the batched entry points.
inline void check_batch_shapes(const char* what, std::size_t batch, std::size_t k,
                               std::size_t vocab, std::size_t p_size, std::size_t draft_size,
                               std::size_t accepted_size, std::size_t emitted_size) {
  check_vocab(vocab, what);
  check_rows(p_size, batch * (k + 1), vocab, what, "p (B x (k+1) x V target distributions)");
  if (draft_size != batch * k) {
    throw Error(std::string(what) + ": draft has " + std::to_string(draft_size) +
                " tokens, expected B x k = " + std::to_string(batch * k));
  }
  if (accepted_size != batch) {
    throw Error(std::string(what) + ": accepted has " + std::to_string(accepted_size) +
                " entries, expected B = " + std::to_string(batch));
  }
  if (emitted_size != batch * (k + 1)) {
    throw Error(std::string(what) + ": emitted has " + std::to_string(emitted_size) +
                " entries, expected B x (k+1) = " + std::to_string(batch * (k + 1)));
  }
}

/// Rethrows a sequence's error with the sequence named.
inline void throw_for_sequence(const VerifyOutcome& outcome, const char* what, std::size_t b) {
  if (outcome.error == VerifyError::none) return;
  const std::string name = std::string(what) + " (sequence " + std::to_string(b) + ")";
  throw_if_error(outcome, name.c_str());
}

}  // namespace detail

/// Batched verify_chain; see the layout at the top of this file.
template <class Real>
void verify_chain_batch(std::span<const Real> p, std::span<const Real> q,
                        std::span<const token_t> draft, std::size_t batch, std::size_t k,
                        std::size_t vocab, std::uint64_t seed, std::uint64_t counter,
                        std::span<std::int32_t> accepted, std::span<token_t> emitted) {
  constexpr const char* what = "verify_chain_batch";
  detail::check_batch_shapes(what, batch, k, vocab, p.size(), draft.size(), accepted.size(),
                             emitted.size());
  detail::check_rows(q.size(), batch * k, vocab, what, "q (B x k x V draft distributions)");
  for (std::size_t b = 0; b < batch; ++b) {
    const PhiloxUniforms uniforms{seed, b, counter};
    const VerifyOutcome out =
        verify_chain_row(p.data() + b * (k + 1) * vocab, q.data() + b * k * vocab,
                         draft.data() + b * k, k, vocab, uniforms);
    detail::throw_for_sequence(out, what, b);
    accepted[b] = static_cast<std::int32_t>(out.accepted);
    write_emitted(out, draft.data() + b * k, k, emitted.data() + b * (k + 1));
  }
}

/// Batched greedy verification (no randomness).
template <class Real>
void verify_chain_greedy_batch(std::span<const Real> p, std::span<const token_t> draft,
                               std::size_t batch, std::size_t k, std::size_t vocab,
                               std::span<std::int32_t> accepted, std::span<token_t> emitted) {
  constexpr const char* what = "verify_chain_greedy_batch";
  detail::check_batch_shapes(what, batch, k, vocab, p.size(), draft.size(), accepted.size(),
                             emitted.size());
  for (std::size_t b = 0; b < batch; ++b) {
    const VerifyOutcome out =
        verify_chain_greedy_row(p.data() + b * (k + 1) * vocab, draft.data() + b * k, k, vocab);
    detail::throw_for_sequence(out, what, b);
    accepted[b] = static_cast<std::int32_t>(out.accepted);
    write_emitted(out, draft.data() + b * k, k, emitted.data() + b * (k + 1));
  }
}

/// Batched one-hot verification (deterministic proposals; no q).
template <class Real>
void verify_chain_onehot_batch(std::span<const Real> p, std::span<const token_t> draft,
                               std::size_t batch, std::size_t k, std::size_t vocab,
                               std::uint64_t seed, std::uint64_t counter,
                               std::span<std::int32_t> accepted, std::span<token_t> emitted) {
  constexpr const char* what = "verify_chain_onehot_batch";
  detail::check_batch_shapes(what, batch, k, vocab, p.size(), draft.size(), accepted.size(),
                             emitted.size());
  for (std::size_t b = 0; b < batch; ++b) {
    const PhiloxUniforms uniforms{seed, b, counter};
    const VerifyOutcome out = verify_chain_onehot_row(p.data() + b * (k + 1) * vocab,
                                                      draft.data() + b * k, k, vocab, uniforms);
    detail::throw_for_sequence(out, what, b);
    accepted[b] = static_cast<std::int32_t>(out.accepted);
    write_emitted(out, draft.data() + b * k, k, emitted.data() + b * (k + 1));
  }
}

}  // namespace specdec::sampling
