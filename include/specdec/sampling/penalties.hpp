#pragma once
// Logit bias and repetition penalties: a function of the context applied to a row of logits
// before the processing of process.hpp (temperature, top-k, top-p, min-p).
//
// They keep speculative decoding exact when the row of every position, drafted ones included,
// is adjusted with the context of THAT position: the prefix plus the drafted tokens before it.
// Then p_i is the penalised target's distribution after x_1 .. x_i and q_i the penalised draft's,
// and the verifier's output law is the penalised target's (docs/math.md). HostSampler does this
// (decoder/sampler.hpp); the device sampler refuses penalties.
//
// The arithmetic is llama.cpp's (llama_sampler_logit_bias, then llama_sampler_penalties; tested
// against llama.cpp's own samplers with tests/data/sampling/llama_penalties.json):
//   1. logit bias: logit[t] += bias, every entry in the list (two entries for one token add up);
//      a bias of -inf bans the token (its logit becomes kBannedLogit, weight exactly 0);
//   2. for each token t that occurs c > 0 times in the window (the last `last_n` tokens of the
//      context):  logit = logit <= 0 ? logit * repeat : logit / repeat;
//                 logit -= c * frequency + presence.
// OpenAI's presence_penalty and frequency_penalty are step 2 with repeat = 1 (OpenAI counts the
// tokens of the completion so far: PenaltyScope::completion).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/common.hpp"

namespace specdec::sampling {

/// What a banned token's logit becomes: the lowest finite float (as a restricted draft head's
/// masked ids, cpu::kMaskedLogit), whose weight is exactly 0 under every processing, and which
/// the processing's finiteness check accepts.
inline constexpr float kBannedLogit = std::numeric_limits<float>::lowest();

/// One logit bias entry (llama.cpp's --logit-bias TOKEN+BIAS, OpenAI's logit_bias).
struct LogitBias {
  token_t token = 0;
  float bias = 0;  ///< finite, or -inf to ban the token
  bool operator==(const LogitBias&) const = default;
};

/// Which tokens the penalties' window is cut from.
enum class PenaltyScope : std::uint8_t {
  context,     ///< the whole sequence, prompt included (llama.cpp)
  completion,  ///< only the tokens generated in this turn (OpenAI, vLLM)
};

/// Repetition penalties and logit bias. The defaults change nothing (llama.cpp's defaults).
struct Penalties {
  float repeat = 1.0f;     ///< > 0; 1: off (llama.cpp --repeat-penalty)
  int last_n = 64;         ///< window length; 0: off, -1: the whole scope (--repeat-last-n)
  float frequency = 0.0f;  ///< subtracted once per occurrence (--frequency-penalty)
  float presence = 0.0f;   ///< subtracted once if present (--presence-penalty)
  PenaltyScope scope = PenaltyScope::context;
  std::vector<LogitBias> logit_bias{};

  /// Whether the penalties of step 2 change anything.
  [[nodiscard]] bool penalising() const {
    return last_n != 0 && (repeat != 1.0f || frequency != 0.0f || presence != 0.0f);
  }
  /// Whether any logit can change.
  [[nodiscard]] bool active() const { return penalising() || !logit_bias.empty(); }
  /// How many tokens of the context the window holds at most (none when not penalising).
  [[nodiscard]] std::size_t window_capacity() const {
    if (!penalising()) return 0;
    return last_n < 0 ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(last_n);
  }
};

/// Throws specdec::Error naming the first bad field (vocab: the model's vocabulary size).
inline void validate(const Penalties& p, std::size_t vocab) {
  if (!std::isfinite(p.repeat) || !(p.repeat > 0.0f) || !std::isfinite(1.0f / p.repeat))
    throw Error("Penalties: the repeat penalty must be finite and > 0 (1 = off), got " +
                std::to_string(p.repeat));
  if (p.last_n < -1)
    throw Error("Penalties: last_n must be >= 0, or -1 for the whole context, got " +
                std::to_string(p.last_n));
  if (!std::isfinite(p.frequency))
    throw Error("Penalties: the frequency penalty must be finite, got " +
                std::to_string(p.frequency));
  if (!std::isfinite(p.presence))
    throw Error("Penalties: the presence penalty must be finite, got " +
                std::to_string(p.presence));
  std::vector<bool> banned(vocab, false);
  std::size_t bans = 0;
  for (const LogitBias& b : p.logit_bias) {
    if (b.token < 0 || static_cast<std::size_t>(b.token) >= vocab)
      throw Error("Penalties: logit bias for token " + std::to_string(b.token) +
                  ", outside the vocabulary (" + std::to_string(vocab) + " tokens)");
    if (std::isnan(b.bias) || b.bias == std::numeric_limits<float>::infinity())
      throw Error("Penalties: the logit bias of token " + std::to_string(b.token) +
                  " must be finite or -inf (a ban), got " + std::to_string(b.bias));
    if (std::isinf(b.bias) && !banned[static_cast<std::size_t>(b.token)]) {
      banned[static_cast<std::size_t>(b.token)] = true;
      ++bans;
    }
  }
  if (vocab > 0 && bans == vocab)
    throw Error("Penalties: the logit bias bans every token of the vocabulary");
}

/// Applies Penalties to rows of logits (see the top of this file). Keeps a count per token of
/// the vocabulary between calls (zeroed again after each row), so a row costs a copy of the
/// logits plus O(window + bias entries).
class PenaltyApplier {
 public:
  PenaltyApplier() = default;
  explicit PenaltyApplier(std::size_t vocab) : counts_(vocab, 0) {}

  /// out = logits adjusted for a position whose context ends with `window` (the tokens the
  /// penalties count: already cut to the last `last_n` of the scope by the caller, see
  /// window_of). out may be logits itself. A NaN or infinite logit of the model is left as it is
  /// (the processing reports it) unless a -inf bias bans that token.
  void apply(const Penalties& p, std::span<const token_t> window, std::span<const float> logits,
             std::span<float> out) {
    if (out.size() != logits.size() || counts_.size() != logits.size())
      throw Error("PenaltyApplier: the row has " + std::to_string(logits.size()) +
                  " logits, the output " + std::to_string(out.size()) + " and the applier " +
                  std::to_string(counts_.size()));
    if (out.data() != logits.data()) std::copy(logits.begin(), logits.end(), out.begin());
    for (const LogitBias& b : p.logit_bias) {
      float& l = out[static_cast<std::size_t>(b.token)];
      l = std::isinf(b.bias) ? kBannedLogit : l + b.bias;
    }
    if (!p.penalising()) return;
    for (const token_t t : window) ++counts_.at(static_cast<std::size_t>(t));
    for (const token_t t : window) {
      const auto id = static_cast<std::size_t>(t);
      const int count = counts_[id];
      if (count == 0) continue;  // done already (a repeated token of the window)
      counts_[id] = 0;
      float& l = out[id];
      if (l == kBannedLogit || !std::isfinite(l)) continue;  // stays banned / stays reported
      l = l <= 0.0f ? l * p.repeat : l / p.repeat;
      l -= static_cast<float>(count) * p.frequency + static_cast<float>(count > 0) * p.presence;
      // A finite logit pushed past the float range by an extreme penalty stays a weight-0 entry
      // instead of becoming -inf (the processing refuses non-finite logits).
      if (l == -std::numeric_limits<float>::infinity()) l = kBannedLogit;
    }
  }

  /// The window of a position: the last `last_n` tokens of `scope_tokens` (all of them when
  /// last_n is -1; none when the penalties are off).
  [[nodiscard]] static std::span<const token_t> window_of(const Penalties& p,
                                                          std::span<const token_t> scope_tokens) {
    const std::size_t n = std::min(p.window_capacity(), scope_tokens.size());
    return scope_tokens.last(n);
  }

  [[nodiscard]] std::size_t vocab() const { return counts_.size(); }

 private:
  std::vector<std::int32_t> counts_;  // [V]: occurrences in the current window, 0 between rows
};

/// Convenience (tests, one-off rows): the adjusted row as a new vector.
inline std::vector<float> apply_penalties(const Penalties& p, std::span<const token_t> context,
                                          std::span<const float> logits) {
  std::vector<float> out(logits.size());
  PenaltyApplier applier(logits.size());
  applier.apply(p, PenaltyApplier::window_of(p, context), logits, out);
  return out;
}

}  // namespace specdec::sampling
