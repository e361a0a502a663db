#pragma once
// The round vocabulary: what the decoders and both backends' samplers say to each other about a
// speculative round, and the concepts naming what a sampler can do. One RoundSampler per sequence
// turns the models' raw logits rows into a round's decisions:
//
//   draft side   draft(model, feed, position): feed tokens to the draft model and draw drafted
//                token x_1 from the last row of its logits (q_0 kept by the sampler);
//                draft_next(model, position): feed the last drafted token, draw the next one;
//                propose(tokens): a model-free drafter's tokens (point masses, no q).
//   verify side  target_input(k): the target's verify input [last token, x_1 .. x_k];
//                verify(rows, k, proposal, position): the k + 1 target rows -> n accepted and
//                the next token y (residual sample or bonus), plus x_1 .. x_k as the host sees
//                them.
//
// Implementations: HostSampler (specdec/decoder/sampler.hpp: host logits, the sampling core of
// this folder) and cuda::DeviceSampler (specdec/cuda/sampler.hpp: device logits, the sampling
// kernels). This header depends on the model concept only, so that a backend's sampler needs
// nothing of the decoder layer.
//
// Capabilities beyond RoundSampler, each a concept below, each looked for by the session:
//   DraftSamplerFor<S, M>   draws drafted tokens from draft model M's logits;
//   SteppedDraftSampler<S>  draws them from rows the caller computed (batched drafting);
//   FusedVerifySampler<S,T> verify forward + verification as one device unit;
//   PenaltySampler<S>       penalties and logit bias per position;
//   LogprobSampler<S>       log-probabilities of the emitted tokens.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/logprobs.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/tree_verify.hpp"

namespace specdec {

/// The Philox streams of one sequence (seed = GenerationConfig::seed). The target's stream is
/// the one the sampling core names "stream b" for sequence b (here b = 0): verify_chain's
/// uniforms and the plain target steps' uniforms. The drafter's stream is set apart by its top
/// bit so that it can never collide with a batched sequence's target stream.
inline constexpr std::uint64_t kTargetStream = 0;
inline constexpr std::uint64_t kDraftStream = std::uint64_t{1} << 63;

/// How the drafted tokens of a round were proposed.
enum class Proposal : std::uint8_t {
  sampled,     ///< drawn by the sampler from a draft model's rows (draft / draft_next): q is kept
  point_mass,  ///< given by a model-free drafter (propose): q is a point mass at each token
};

/// The tokens of a round's verify forward, [last token of the sequence, x_1 .. x_k]: on the host
/// (HostSampler) or in device memory (cuda::DeviceSampler; the drafted tokens never left it).
struct TargetInput {
  std::span<const token_t> host;
  DeviceTokens device;
  [[nodiscard]] std::size_t size() const {
    return device.data != nullptr ? device.count : host.size();
  }
};

/// What a round's verification decided.
struct RoundVerdict {
  std::size_t accepted = 0;          ///< n: x_1 .. x_n are kept
  token_t next = -1;                 ///< y: residual sample (n < k) or bonus token (n == k)
  std::span<const token_t> drafted;  ///< x_1 .. x_k (host copy, valid until the next round)
  /// p(x_i), q(x_i) for i = 1 .. k (RoundRecord::p_drafted); empty when not reported.
  std::span<const float> p_drafted, q_drafted;
  /// With log-probabilities on (HostSampler::set_logprobs): those of x_1 .. x_n, y, from the
  /// target's rows 0 .. n; else empty.
  std::span<const sampling::TokenLogprob> logprobs{};
};

/// What a tree round's verification decided (TreeSampler below). The tree is the target's: node 0
/// the sequence's last token, node i > 0 a proposed token after node parents[i].
struct TreeVerdict {
  std::span<const std::size_t> path;  ///< the accepted nodes after node 0, root first
  token_t next = -1;                  ///< y: residual sample, or bonus token after a leaf
  bool leaf = false;                  ///< the path ended at a node without children
  /// With log-probabilities on: those of the path's tokens and y; else empty.
  std::span<const sampling::TokenLogprob> logprobs{};
};

/// Capability: S verifies token trees of point-mass proposals (a TreeDrafter's) against the
/// target's rows for the tree: s.verify_tree(rows, tokens, parents, position).
template <class S>
concept TreeSampler = requires(S& s, const LogitsView& rows, std::span<const token_t> tokens,
                               std::span<const std::int32_t> parents, std::size_t position) {
  { s.verify_tree(rows, tokens, parents, position) } -> std::same_as<TreeVerdict>;
};

/// Capability: S also drafts and verifies trees of sampled candidates (a draft model's tree at
/// temperature > 0, ModelTreeDrafter): s.draw_candidates(logits, path, position, q, drawn,
/// ranked) processes a draft row into q and draws distinct tokens from it without replacement;
/// s.verify_tree(rows, tokens, parents, position, proposal, q) verifies with the rows the
/// children were drawn from (q: n x V, the tree's order).
template <class S>
concept SampledTreeSampler = TreeSampler<S> &&
    requires(S& s, const S& cs, const LogitsView& rows, std::span<const float> in,
             std::span<float> out, std::span<const token_t> tokens, std::span<token_t> drawn,
             std::span<const std::int32_t> parents, std::size_t position,
             sampling::TreeProposal proposal) {
  { s.draw_candidates(in, tokens, position, out, drawn, out) } -> std::same_as<std::size_t>;
  { s.verify_tree(rows, tokens, parents, position, proposal, in) } -> std::same_as<TreeVerdict>;
  { cs.params() } -> std::convertible_to<const sampling::SamplingParams&>;
};

/// A per-sequence sampler (see the top of this file). Positions name the sequence index of the
/// token whose forward produced a row, for the errors (e.g. "target model: logits at position 37
/// contain NaN (token 1234)"). Also required, per model type M the sampler drafts from:
/// s.draft(m, tokens, position) and s.draft_next(m, position) (DraftSamplerFor below). What a
/// sampler may offer beyond this is named by the capability concepts below..
template <class S>
concept RoundSampler = requires(S& s, const LogitsView& rows, std::span<const token_t> tokens,
                                std::size_t n, token_t t, const sampling::SamplingParams& params,
                                std::uint64_t seed, Proposal proposal) {
  requires std::same_as<std::remove_cvref_t<decltype(S::memory)>, Memory>;
  s.begin(params, seed);  ///< a new sequence: these parameters, both streams at counter 0
  s.set_params(params);   ///< a continued sequence: new parameters, the streams go on
  s.begin_round(t);       ///< a round begins; t = the sequence's last token (the verify's first)
  s.propose(tokens);      ///< point-mass proposal x_1 .. x_k
  { s.target_input(n) } -> std::same_as<TargetInput>;
  { s.verify(rows, n, proposal, n) } -> std::same_as<RoundVerdict>;
  { s.take_seconds() } -> std::same_as<double>;  ///< host time spent sampling since last asked
};

/// S can draw drafted tokens from the logits of draft model M.
template <class S, class M>
concept DraftSamplerFor = RoundSampler<S> &&
    requires(S& s, M& m, std::span<const token_t> t, std::size_t position) {
  s.draft(m, t, position);
  s.draft_next(m, position);
};

/// S can draw drafted tokens from rows the caller computed (the draft phase in steps, so that a
/// driver can batch several sequences' draft forwards): s.draft_rows(rows, fed, position) draws
/// the next token from the last of the rows of the `fed` tokens; s.last_drafted() is the token
/// the next step feeds.
template <class S>
concept SteppedDraftSampler = RoundSampler<S> &&
    requires(S& s, const S& cs, const LogitsView& rows, std::size_t n) {
  s.draft_rows(rows, n, n);
  { cs.last_drafted() } -> std::same_as<std::span<const token_t>>;
};

/// Capability: S runs the target's verify forward and the verification as one unit
/// (cuda::DeviceSampler captures them in one graph, so the drafted tokens and the rows never
/// leave the device): s.verify_forward(target, k, proposal, position) replaces
/// target.forward(s.target_input(k)) followed by s.verify(rows, ...). The session takes this
/// path when the sampler offers it.
template <class S, class Target>
concept FusedVerifySampler = RoundSampler<S> &&
    requires(S& s, Target& target, std::size_t n, Proposal proposal) {
  { s.verify_forward(target, n, proposal, n) } -> std::same_as<RoundVerdict>;
};

/// Capability: S applies repetition penalties and a logit bias (sampling/penalties.hpp) to every
/// row with the context of its own position: set_penalties once per request, set_history at the
/// start of each round (the tokens the penalties count before the round's drafted ones).
template <class S>
concept PenaltySampler = RoundSampler<S> &&
    requires(S& s, const sampling::Penalties& penalties, std::span<const token_t> history) {
  s.set_penalties(penalties);
  s.set_history(history);
};

/// Capability: S reports the log-probabilities of the emitted tokens (RoundVerdict::logprobs),
/// with up to `top` alternatives each.
template <class S>
concept LogprobSampler = RoundSampler<S> && requires(S& s, bool on, std::size_t top) {
  s.set_logprobs(on, top);
};

/// The RoundSampler for logits in `memory`: HostSampler for Memory::host; the device
/// specialisation is cuda::DeviceSampler, declared by <specdec/cuda/sampler.hpp> (which
/// <specdec/cuda/transformer.hpp> includes).
template <Memory memory>
struct SamplerFor;

/// The sampler of a sequence whose target is a Target.
template <class Target>
using sampler_for_t = typename SamplerFor<logits_memory_v<Target>>::type;

namespace detail {

/// "draft model: logits at position 37 contain NaN (token 1234)".
[[noreturn]] inline void throw_bad_logit(std::string_view model, std::size_t position,
                                         std::size_t token, double value) {
  const char* what = std::isnan(value) ? "NaN" : (value > 0 ? "+inf" : "-inf");
  throw Error(std::string(model) + ": logits at position " + std::to_string(position) +
              " contain " + what + " (token " + std::to_string(token) + ")");
}

/// Throws (naming the model and the position) when the row has a NaN or infinite logit.
inline void check_finite_logits(std::span<const float> row, std::string_view model,
                                std::size_t position) {
  for (std::size_t j = 0; j < row.size(); ++j) {
    if (!std::isfinite(row[j])) throw_bad_logit(model, position, j, row[j]);
  }
}

/// Checks that a forward pass returned `rows` rows of `vocab` logits in the memory its model type
/// declares (logits_memory_v).
inline void check_logits(const LogitsView& v, std::size_t rows, std::size_t vocab,
                         std::string_view who, Memory expected = Memory::host) {
  if (v.where != expected)
    throw Error(std::string(who) +
                (expected == Memory::host
                     ? ": logits are in device memory, but the model type declares host logits; "
                       "a model returning device logits declares `static constexpr Memory "
                       "logits_memory = Memory::device` (model/causal_lm.hpp) and is sampled by "
                       "the device sampler"
                     : ": logits are in host memory, but the model type declares device logits"));
  if (v.data == nullptr || v.rows != rows || v.vocab != vocab)
    throw Error(std::string(who) + ": forward returned " + std::to_string(v.rows) + " x " +
                std::to_string(v.vocab) + " logits, expected " + std::to_string(rows) + " x " +
                std::to_string(vocab));
}

/// Checks that proposed tokens are token ids of the vocabulary.
inline void check_proposal(std::span<const token_t> tokens, std::size_t vocab) {
  for (const token_t x : tokens)
    if (x < 0 || static_cast<std::size_t>(x) >= vocab)
      throw Error("SpeculativeDecoder: the drafter proposed token " + std::to_string(x) +
                  ", outside the target's vocabulary (" + std::to_string(vocab) + ")");
}

}  // namespace detail

}  // namespace specdec
