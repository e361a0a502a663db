#pragma once
// AutoregressiveDecoder<Model>: the baseline, one target forward per generated token, with the
// same settings, stop rules, callbacks, statistics and RNG streams as SpeculativeDecoder. It is a
// SpeculativeSession whose drafter proposes nothing (NoDrafter): every round is a plain target
// step (k = 0), sampled by the same sampler as a speculative round's bonus token.
//
// Bookkeeping: the prompt minus its last token is prefilled; each step feeds the last token of
// the sequence (the last prompt token, then each generated one) and samples the next from that
// row, so the model's cache always holds the sequence minus its last token.

#include <span>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec {

template <CausalLM Model>
class AutoregressiveDecoder {
 public:
  using Session = SpeculativeSession<NoDrafter, Model>;

  /// The tokenizer (optional) is used for the streamed text, stop strings and the EOS id. The
  /// model and tokenizer must outlive the decoder.
  explicit AutoregressiveDecoder(Model& model, const Tokenizer* tokenizer = nullptr)
      : session_(model, tokenizer) {}

  /// Generates a continuation of `prompt` (token ids, BOS included if the model wants one).
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    session_.start(prompt, config, callbacks);
    return session_.run();
  }

  /// Tokenizes `prompt` with the tokenizer (adding BOS as the model expects) and generates.
  GenerationResult generate(std::string_view prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    if (!session_.tokenizer())
      throw Error("AutoregressiveDecoder: a text prompt needs a tokenizer");
    const std::vector<token_t> ids = session_.tokenizer()->encode(prompt, true);
    return generate(std::span<const token_t>(ids), config, callbacks);
  }

  /// Continues the last sequence with `tokens` and generates (only they are prefilled).
  GenerationResult continue_with(std::span<const token_t> tokens, const GenerationConfig& config,
                                 const Callbacks& callbacks = {}) {
    session_.append(tokens, config, callbacks);
    return session_.run();
  }

  [[nodiscard]] Model& model() { return session_.target(); }
  [[nodiscard]] const Tokenizer* tokenizer() const { return session_.tokenizer(); }
  [[nodiscard]] Session& session() { return session_; }

 private:
  Session session_;
};

}  // namespace specdec
