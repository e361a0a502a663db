#pragma once
// What both decoders share: the generation settings, the streaming callbacks, the result, and
// the Emitter that appends accepted tokens to the output and decides when to stop (EOS, token
// budget, stop strings), so that AutoregressiveDecoder and SpeculativeDecoder stop at exactly the
// same token for the same token sequence.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/sampler.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/sampling/logprobs.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec {

/// Settings of one generate() call, the same for the baseline and the speculative decoder.
struct GenerationConfig {
  std::size_t max_new_tokens = 128;  ///< token budget (EOS is not counted: it is not emitted)
  /// Applied to the target's logits and, identically, to the draft's (temperature 0: greedy).
  sampling::SamplingParams sampling{};
  /// Repetition penalties and logit bias, applied before `sampling` to both models' rows, each
  /// with the context of its own position (sampling/penalties.hpp). Host samplers only.
  sampling::Penalties penalties{};
  std::uint64_t seed = 0;  ///< Philox seed; see docs/decoder.md for the streams
  /// Stop when the generated text contains one of these (needs a tokenizer). The stop string
  /// and what follows it are cut from the text; the token that completed it stays in `tokens`.
  std::vector<std::string> stop_strings;
  bool stop_at_eos = true;
  token_t eos_token = -1;  ///< -1: the tokenizer's eos() (none without a tokenizer)
  /// More ids that end the generation as EOS does (StopReason::eos, not emitted), e.g. a chat
  /// template's end-of-turn tokens (<|im_end|>, <|eot_id|>) when they differ from the EOS.
  /// Unlike the EOS they apply even when stop_at_eos is false.
  std::vector<token_t> stop_tokens;
  bool record_rounds = false;  ///< keep a RoundRecord per round in GenerationResult::rounds
  /// Write control tokens ("<|im_end|>", ...) into the text as their pieces instead of
  /// skipping them (llama.cpp's --special). An EOS or stop token still ends the generation
  /// without being emitted.
  bool special_tokens_as_text = false;
  /// Report each generated token's log-probability under the target (GenerationResult::logprobs,
  /// TokenEvent::logprob) with the top_logprobs most likely tokens of its row. From the
  /// processed target row the token was decided on (greedy: the softmax of the logits); none of
  /// it comes from the draft. Host samplers only.
  bool logprobs = false;
  std::size_t top_logprobs = 0;
};

/// One emitted token and the text it made final. `token` is -1 for the last event of a
/// generation when the detokenizer still held text (e.g. a stop-string prefix that did not
/// complete, or an unfinished UTF-8 sequence); `text` is empty without a tokenizer.
struct TokenEvent {
  token_t token = -1;
  std::string_view text;
  std::size_t index = 0;  ///< 0-based index of the token among the generated ones
  /// The token's log-probability when GenerationConfig::logprobs (else null); valid during the
  /// callback.
  const sampling::TokenLogprob* logprob = nullptr;
};

/// Optional hooks, all called on the generating thread.
struct Callbacks {
  std::function<void(const TokenEvent&)> on_token;   ///< every emitted token, in order
  std::function<void(const RoundRecord&)> on_round;  ///< after each round
  std::function<bool()> should_stop;                 ///< polled before each round: true cancels
};

struct GenerationResult {
  std::vector<token_t> tokens;  ///< generated ids (prompt and EOS excluded)
  /// With GenerationConfig::logprobs: one per token of `tokens`, in order.
  std::vector<sampling::TokenLogprob> logprobs;
  std::string text;  ///< their text (empty without a tokenizer), stop string cut
  StopReason stop_reason = StopReason::max_tokens;
  GenerationStats stats;
  std::vector<RoundRecord> rounds;  ///< when GenerationConfig::record_rounds
};

namespace detail {

/// The end-of-sequence id a config asks for: its own, else the tokenizer's, else none (-1).
inline token_t resolve_eos(const GenerationConfig& cfg, const Tokenizer* tok) {
  if (!cfg.stop_at_eos) return -1;
  if (cfg.eos_token >= 0) return cfg.eos_token;
  return tok ? tok->eos() : -1;
}

/// Throws when a generation cannot start: empty prompt, a sequence (`before` tokens already
/// held plus the prompt) longer than the context, stop strings without a tokenizer, an empty stop
/// string.
inline void check_request(std::span<const token_t> prompt, std::size_t context_length,
                          std::size_t vocab, const GenerationConfig& cfg, const Tokenizer* tok,
                          std::size_t before = 0) {
  if (prompt.empty())
    throw Error("generate: the prompt is empty (it needs at least one token, e.g. BOS)");
  if (before + prompt.size() > context_length)
    throw Error("generate: the prompt has " + std::to_string(prompt.size()) + " tokens" +
                (before ? " after the " + std::to_string(before) + " of the conversation so far"
                        : std::string()) +
                ", more than the target's context length " + std::to_string(context_length));
  for (const token_t t : prompt)
    if (t < 0 || static_cast<std::size_t>(t) >= vocab)
      throw Error("generate: prompt token " + std::to_string(t) + " is outside the vocabulary (" +
                  std::to_string(vocab) + ")");
  if (!cfg.stop_strings.empty() && tok == nullptr)
    throw Error("generate: stop strings need a tokenizer");
  for (const auto& s : cfg.stop_strings)
    if (s.empty()) throw Error("generate: empty stop string");
}

/// Appends tokens to the output, streams their text, and decides when generation stops.
///
/// Stop strings are matched on the detokenized text of the generated tokens. Text that might
/// be the beginning of a stop string is held back (not streamed) until it either completes the
/// stop string (then it is dropped with everything after it) or cannot any more. Because of the
/// hold-back, a stop string can only start inside the held text, so only that is searched.
class Emitter {
 public:
  /// Emits into `sequence` (which already ends with `prompt`, the tokens this generation
  /// continues) and `result`; cfg, sequence and result must outlive the Emitter.
  Emitter(std::span<const token_t> prompt, const GenerationConfig& cfg, const Tokenizer* tok,
          std::function<void(const TokenEvent&)> on_token, std::vector<token_t>& sequence,
          GenerationResult& result)
      : cfg_(&cfg),
        on_token_(std::move(on_token)),
        sequence_(&sequence),
        result_(&result),
        eos_(resolve_eos(cfg, tok)) {
    if (tok) {
      tok_ = tok;
      detok_.emplace(*tok);
      // The generated text continues the prompt's: prime the detokenizer with the prompt so
      // that the first generated piece keeps its leading space and completes any UTF-8
      // sequence the prompt left open. The prompt's own text is not emitted.
      for (const token_t t : prompt) (void)detok_->push(t);
    }
    if (cfg.max_new_tokens == 0) reason_ = StopReason::max_tokens;
  }

  [[nodiscard]] std::size_t remaining() const {
    return cfg_->max_new_tokens - result_->tokens.size();
  }
  [[nodiscard]] bool stopped() const { return reason_.has_value(); }

  /// Emits token t (with its log-probability, when reported). Returns false (and stops) on EOS,
  /// a completed stop string or the budget.
  bool emit(token_t t, const sampling::TokenLogprob* logprob = nullptr) {
    if (reason_) return false;
    if ((eos_ >= 0 && t == eos_) || std::find(cfg_->stop_tokens.begin(), cfg_->stop_tokens.end(),
                                              t) != cfg_->stop_tokens.end()) {
      reason_ = StopReason::eos;
      return false;
    }
    sequence_->push_back(t);
    result_->tokens.push_back(t);
    if (logprob != nullptr) {
      result_->logprobs.push_back(*logprob);
      logprob = &result_->logprobs.back();
    }
    const std::size_t index = result_->tokens.size() - 1;
    if (detok_) {
      if (cfg_->special_tokens_as_text && tok_->is_control(t)) {
        held_ += detok_->flush();  // an unfinished UTF-8 sequence ends before the piece
        held_ += tok_->token_piece(t);
      } else {
        held_ += detok_->push(t);
      }
      release(false);
    }
    if (on_token_) on_token_(TokenEvent{t, released_, index, logprob});
    if (!reason_ && result_->tokens.size() >= cfg_->max_new_tokens)
      reason_ = StopReason::max_tokens;
    return !reason_;
  }

  /// Ends the generation with `reason` unless a stop was already decided; flushes held text.
  void finish(StopReason reason) {
    if (!reason_) reason_ = reason;
    if (detok_ && *reason_ != StopReason::stop_string) {
      held_ += detok_->flush();
      release(true);
      if (!released_.empty() && on_token_)
        on_token_(TokenEvent{-1, released_, result_->tokens.size()});
    }
    result_->stop_reason = *reason_;
  }

 private:
  /// Moves what is final from held_ to the result's text (released_ = that piece).
  void release(bool at_end) {
    released_.clear();
    // The earliest complete stop string in the held text ends the generation.
    std::size_t cut = std::string::npos;
    for (const auto& s : cfg_->stop_strings) cut = std::min(cut, held_.find(s));
    std::size_t keep = 0;  // bytes to keep holding
    if (cut != std::string::npos) {
      reason_ = StopReason::stop_string;
      held_.resize(cut);
    } else if (!at_end) {
      // Hold the longest suffix of held_ that is a proper prefix of some stop string.
      for (const auto& s : cfg_->stop_strings)
        for (std::size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
          if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
            keep = len;
            break;
          }
    }
    released_.assign(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    result_->text += released_;
  }

  const GenerationConfig* cfg_;
  std::function<void(const TokenEvent&)> on_token_;
  std::vector<token_t>* sequence_;
  GenerationResult* result_;
  token_t eos_;
  const Tokenizer* tok_ = nullptr;
  std::optional<IncrementalDetokenizer> detok_;
  std::string held_;      ///< decoded text not yet released (a possible stop-string prefix)
  std::string released_;  ///< the text released by the last emit()
  std::optional<StopReason> reason_;
};

}  // namespace detail
}  // namespace specdec
