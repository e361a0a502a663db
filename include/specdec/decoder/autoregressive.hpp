#pragma once
// AutoregressiveDecoder<Model>: the baseline, one target forward per generated token, with the
// same settings, stop rules, callbacks, statistics and RNG streams as SpeculativeDecoder.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec {

template <CausalLM Model>
class AutoregressiveDecoder {
 public:
  /// The tokenizer (optional) is used for the streamed text, stop strings and the EOS id. The
  /// model and tokenizer must outlive the decoder.
  explicit AutoregressiveDecoder(Model& model, const Tokenizer* tokenizer = nullptr)
      : model_(&model), tokenizer_(tokenizer) {
    if (tokenizer_ && tokenizer_->vocab_size() > model_->vocab_size())
      throw Error("AutoregressiveDecoder: the tokenizer has " +
                  std::to_string(tokenizer_->vocab_size()) + " tokens, the model only " +
                  std::to_string(model_->vocab_size()));
  }

  /// Generates a continuation of `prompt` (token ids, BOS included if the model wants one).
  ///
  /// Bookkeeping: the prompt minus its last token is prefilled; each step feeds the last token
  /// of the sequence (the last prompt token, then each generated one) and samples the next from
  /// that row, so the model's cache always holds the sequence minus its last token.
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    const std::size_t vocab = model_->vocab_size();
    const std::size_t context = model_->context_length();
    sampling::validate(config.sampling);
    detail::check_request(prompt, context, vocab, config, tokenizer_);

    GenerationResult result;
    GenerationStats& stats = result.stats;
    stats.prompt_tokens = prompt.size();
    detail::Emitter out(prompt, config, tokenizer_, callbacks, result);
    sampling::PhiloxStream rng(config.seed, kTargetStream);
    std::vector<float> probs(vocab);  // [V] processed distribution of the current step

    {
      ScopedTimer timer(stats.prefill_seconds);
      model_->rollback(0);
      if (prompt.size() > 1) {
        const LogitsView logits = model_->forward(prompt.first(prompt.size() - 1));
        detail::check_logits(logits, prompt.size() - 1, vocab, "model (prefill)");
      }
    }

    ScopedTimer decode_timer(stats.decode_seconds);
    while (!out.stopped()) {
      if (callbacks.should_stop && callbacks.should_stop()) {
        out.finish(StopReason::cancelled);
        break;
      }
      const std::vector<token_t>& sequence = out.sequence();
      if (sequence.size() >= context) {  // the next token would not fit
        out.finish(StopReason::context_full);
        break;
      }
      if (model_->cached() + 1 != sequence.size())
        throw Error("AutoregressiveDecoder: the model's cache (" +
                    std::to_string(model_->cached()) + " positions) is out of step with the " +
                    "sequence (" + std::to_string(sequence.size()) + " tokens)");
      LogitsView logits;
      {
        ScopedTimer timer(stats.verify_seconds);
        logits = model_->forward(std::span<const token_t>(&sequence.back(), 1));
        detail::check_logits(logits, 1, vocab, "model");
      }
      token_t next = -1;
      {
        ScopedTimer timer(stats.sampling_seconds);
        next = detail::sample_token(logits.row(0), config.sampling, probs, rng);
      }
      ++stats.rounds;
      ++stats.target_passes;
      out.emit(next);
    }
    out.finish(StopReason::max_tokens);  // keeps the reason already decided
    decode_timer.stop();
    stats.tokens_emitted = result.tokens.size();
    stats.finalize();
    return result;
  }

  /// Tokenizes `prompt` with the tokenizer (adding BOS as the model expects) and generates.
  GenerationResult generate(std::string_view prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    if (!tokenizer_) throw Error("AutoregressiveDecoder: a text prompt needs a tokenizer");
    const std::vector<token_t> ids = tokenizer_->encode(prompt, true);
    return generate(std::span<const token_t>(ids), config, callbacks);
  }

  [[nodiscard]] Model& model() { return *model_; }
  [[nodiscard]] const Tokenizer* tokenizer() const { return tokenizer_; }

 private:
  Model* model_;
  const Tokenizer* tokenizer_;
};

}  // namespace specdec
