#pragma once
// The sampling seam between the decoders and the backends: one RoundSampler per sequence turns
// the models' raw logits rows into a round's decisions.
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
// The sampler owns everything it keeps of a round (the drafted tokens and the draft's rows q),
// so the decoders pass raw logits and never see distributions. Two implementations:
//   HostSampler        (here) host logits, the sampling core (include/specdec/sampling/);
//   cuda::DeviceSampler (include/specdec/cuda/sampler.hpp) device logits, the sampling kernels,
//                      the drafted tokens kept in device memory and fed to the models from there.
// Which one a decoder uses follows at compile time from where its target's logits live
// (logits_memory_v, model/causal_lm.hpp): SamplerFor<memory>::type. Both make the same decisions
// on the same distributions with the same Philox uniforms (streams below, docs/decoder.md).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"

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
};

/// A per-sequence sampler (see the top of this file). Positions name the sequence index of the
/// token whose forward produced a row, for the errors (e.g. "target model: logits at position 37
/// contain NaN (token 1234)"). Also required, per model type M the sampler drafts from:
/// s.draft(m, tokens, position) and s.draft_next(m, position) (DraftSamplerFor below).
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

// ------------------------------------------------------------------------------ HostSampler

/// The RoundSampler of models with host logits: logits are processed by sampling::process_logits
/// and decided by verify_chain / verify_chain_onehot / verify_chain_greedy (sampling core).
///
/// Storage: the round's tokens [last, x_1 .. x_k] and the draft's processed rows q (k x V), kept
/// from draft() until verify(); the target's processed rows p ((k + 1) x V) during verify().
/// Every row is processed in full today; the seam lets a later version be lazier (greedy needs
/// only argmaxes; an accepted token only p(x) and q(x); only a rejection or the bonus needs a
/// whole distribution) without changing the decoders.
class HostSampler {
 public:
  static constexpr Memory memory = Memory::host;

  /// A sampler for rows of `vocab` logits (max_k: the usual draft length, to reserve storage).
  HostSampler(std::size_t vocab, std::size_t max_k) : vocab_(vocab) {
    if (vocab == 0) throw Error("HostSampler: vocabulary size is 0");
    q_.reserve(max_k * vocab);
    p_.reserve((max_k + 1) * vocab);
  }
  /// A sampler for the rows of `target` (and of a draft model with the same vocabulary).
  template <CausalLM M>
  HostSampler(const M& target, std::size_t max_k) : HostSampler(target.vocab_size(), max_k) {}

  void begin(const sampling::SamplingParams& params, std::uint64_t seed) {
    set_params(params);
    target_rng_ = sampling::PhiloxStream(seed, kTargetStream);
    draft_rng_ = sampling::PhiloxStream(seed, kDraftStream);
  }
  void set_params(const sampling::SamplingParams& params) {
    sampling::validate(params);
    params_ = params;
  }

  void begin_round(token_t last) {
    tokens_.assign(1, last);
    q_.clear();
  }

  /// Feeds `feed` to the draft model and draws x_1 from its last row.
  template <CausalLM M>
  void draft(M& model, std::span<const token_t> feed, std::size_t position) {
    draft_rows(model.forward(feed), feed.size(), position);
  }

  /// Feeds the last drafted token to the draft model and draws the next one from its row.
  template <CausalLM M>
  void draft_next(M& model, std::size_t position) {
    const std::span<const token_t> feed = last_drafted();
    draft_rows(model.forward(feed), feed.size(), position);
  }

  /// The two halves of draft() / draft_next(), for a driver that runs the draft model's forward
  /// itself (batched with other sequences' forwards): `logits` are the draft model's rows for
  /// the `fed` tokens it was fed; the next drafted token is drawn from the last row.
  void draft_rows(const LogitsView& logits, std::size_t fed, std::size_t position) {
    detail::check_logits(logits, fed, vocab_, "draft model");
    draw(logits.row(logits.rows - 1), position);
  }
  /// The last drafted token, as draft_next() feeds it to the draft model.
  [[nodiscard]] std::span<const token_t> last_drafted() const {
    if (tokens_.size() < 2) throw Error("HostSampler::draft_next: nothing drafted yet");
    return std::span<const token_t>(tokens_).last(1);
  }

  void propose(std::span<const token_t> tokens) {
    detail::check_proposal(tokens, vocab_);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  }

  [[nodiscard]] TargetInput target_input(std::size_t k) const {
    check_k(k);
    return TargetInput{std::span<const token_t>(tokens_).first(k + 1), {}};
  }

  /// Processes the k + 1 target rows and verifies x_1 .. x_k against them (k = 0: one plain
  /// target step). Uniforms: the target stream, k + 1 counters (none when greedy).
  RoundVerdict verify(const LogitsView& target, std::size_t k, Proposal proposal,
                      std::size_t position) {
    check_k(k);
    detail::check_logits(target, k + 1, vocab_, "target model");
    const auto t0 = std::chrono::steady_clock::now();
    p_.resize((k + 1) * vocab_);
    for (std::size_t r = 0; r <= k; ++r)
      process(target.row(r), std::span<float>(p_.data() + r * vocab_, vocab_), "target model",
              position + r);
    const std::span<const token_t> drafted = std::span<const token_t>(tokens_).subspan(1, k);
    const std::span<const float> p(p_);
    sampling::VerifyResult verdict{};
    if (params_.greedy()) {
      verdict = sampling::verify_chain_greedy<float>(p, drafted, vocab_);
    } else if (proposal == Proposal::point_mass || k == 0) {
      verdict = sampling::verify_chain_onehot<float>(p, drafted, vocab_, target_rng_);
    } else {
      if (q_.size() < k * vocab_)
        throw Error("HostSampler::verify: " + std::to_string(k) + " sampled drafts, but only " +
                    std::to_string(q_.size() / vocab_) + " draft rows were kept");
      verdict = sampling::verify_chain<float>(p, std::span<const float>(q_).first(k * vocab_),
                                              drafted, vocab_, target_rng_);
    }
    // What the acceptance test compared, for the round record (k lookups).
    p_drafted_.resize(k);
    q_drafted_.resize(k);
    const bool have_q = proposal == Proposal::sampled && q_.size() >= k * vocab_;
    for (std::size_t i = 0; i < k; ++i) {
      const auto x = static_cast<std::size_t>(drafted[i]);
      p_drafted_[i] = p_[i * vocab_ + x];
      q_drafted_[i] = have_q ? q_[i * vocab_ + x] : 1.0f;  // a point mass otherwise
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return RoundVerdict{verdict.accepted, verdict.next, drafted, p_drafted_, q_drafted_};
  }

  double take_seconds() { return std::exchange(seconds_, 0.0); }

  /// The distributions of the last round: q (draft rows kept) and p (target rows).
  [[nodiscard]] std::span<const float> q_rows() const { return q_; }
  [[nodiscard]] std::span<const float> p_rows() const { return p_; }
  [[nodiscard]] const sampling::SamplingParams& params() const { return params_; }

 private:
  /// Processes a draft row into q_slot and draws x from it (the draft stream; greedy: argmax).
  void draw(std::span<const float> row, std::size_t position) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t slot = tokens_.size() - 1;
    q_.resize((slot + 1) * vocab_);
    const std::span<float> q(q_.data() + slot * vocab_, vocab_);
    process(row, q, "draft model", position);
    const token_t x = params_.greedy()
                          ? static_cast<token_t>(sampling::argmax<float>(std::span<const float>(q)))
                          : sampling::sample_from<float>(q, draft_rng_.next());
    tokens_.push_back(x);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  /// process_logits, whose own check of the logits (it throws on a NaN or infinity) is
  /// rethrown naming the model and the position: no second pass over the row when all is well.
  void process(std::span<const float> row, std::span<float> out, std::string_view model,
               std::size_t position) const {
    try {
      sampling::process_logits<float>(row, params_, out);
    } catch (const Error&) {
      detail::check_finite_logits(row, model, position);
      throw;
    }
  }

  void check_k(std::size_t k) const {
    if (tokens_.empty() || k + 1 > tokens_.size())
      throw Error("HostSampler: a round of " + std::to_string(k) + " drafted tokens, but " +
                  std::to_string(tokens_.empty() ? 0 : tokens_.size() - 1) + " were drafted");
  }

  std::size_t vocab_;
  sampling::SamplingParams params_{};
  sampling::PhiloxStream target_rng_{0, kTargetStream};
  sampling::PhiloxStream draft_rng_{0, kDraftStream};
  std::vector<token_t> tokens_;  // [1 + k]: the sequence's last token, x_1 .. x_k
  std::vector<float> q_;         // [k][V]: processed draft rows (Proposal::sampled)
  std::vector<float> p_;         // [k + 1][V]: processed target rows of the last verify
  std::vector<float> p_drafted_, q_drafted_;  // [k]: p(x_i), q(x_i) of the last verify
  double seconds_ = 0;
};

template <>
struct SamplerFor<Memory::host> {
  using type = HostSampler;
};

static_assert(RoundSampler<HostSampler>);
static_assert(SteppedDraftSampler<HostSampler>);

}  // namespace specdec
