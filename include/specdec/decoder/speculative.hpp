#pragma once
// SpeculativeDecoder<Draft, Target>: exact speculative decoding of one sequence at a time.
//
// One round (docs/decoder.md has the full bookkeeping, with the positions each model holds):
//   1. Draft: the drafter proposes x_1 .. x_k (a draft model's tokens are drawn by the sampler,
//      which keeps q_1 .. q_k).
//   2. Verify: target.forward([last token of the sequence, x_1 .. x_k]) -> k+1 rows of logits,
//      processed into p_0 .. p_k with the same SamplingParams as q.
//   3. verify_chain(p, q, x) -> n accepted and the next token y (residual sample at the first
//      rejection, or bonus token from p_k when all k are accepted).
//   4. Emit x_1 .. x_n, y. The target's cache is cut back to the sequence before the round plus
//      x_1 .. x_n; y is the first token of the next verify. The drafter is told that only that
//      much of the sequence is valid (a draft model then holds it up to x_min(n, k-1)).
//
// The decoder is a SpeculativeSession (decoder/session.hpp: the round API, the phases of a round,
// continuing a conversation) plus generate(), which runs it from a prompt to a stop. Draft is
// either a Drafter (NGramDrafter, a ModelDrafter, your own) or any CausalLM, which is wrapped in a
// ModelDrafter. The sampling runs where the target's logits live (sampling/round.hpp).

#include <span>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec {

template <class Draft, CausalLM Target>
requires(Drafter<Draft> || CausalLM<Draft>) class SpeculativeDecoder {
 public:
  using Session = SpeculativeSession<Draft, Target>;

  /// The draft and target (and tokenizers, optional) must outlive the decoder. `tokenizer` is
  /// the target's: used for the streamed text, stop strings and the EOS id. When the draft's
  /// tokenizer is given as well it must have the same vocabulary size. Throws specdec::Error
  /// when the draft's and target's vocabulary sizes differ.
  SpeculativeDecoder(Draft& draft, Target& target, SpeculativeOptions options = {},
                     const Tokenizer* tokenizer = nullptr,
                     const Tokenizer* draft_tokenizer = nullptr)
      : session_(draft, target, options, tokenizer, draft_tokenizer) {}

  /// Generates a continuation of `prompt` (token ids, BOS included if the model wants one).
  /// Every call starts a new sequence (both caches are reset).
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    session_.start(prompt, config, callbacks);
    return session_.run();
  }

  /// Tokenizes `prompt` with the tokenizer (adding BOS as the model expects) and generates.
  GenerationResult generate(std::string_view prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    if (!session_.tokenizer()) throw Error("SpeculativeDecoder: a text prompt needs a tokenizer");
    const std::vector<token_t> ids = session_.tokenizer()->encode(prompt, true);
    return generate(std::span<const token_t>(ids), config, callbacks);
  }

  /// Continues the last sequence with `tokens` (the next turn of a conversation) and generates:
  /// only the new tokens are prefilled.
  GenerationResult continue_with(std::span<const token_t> tokens, const GenerationConfig& config,
                                 const Callbacks& callbacks = {}) {
    session_.append(tokens, config, callbacks);
    return session_.run();
  }

  [[nodiscard]] const SpeculativeOptions& options() const { return session_.options(); }
  void set_options(const SpeculativeOptions& options) { session_.set_options(options); }
  [[nodiscard]] const Tokenizer* tokenizer() const { return session_.tokenizer(); }
  [[nodiscard]] auto& drafter() { return session_.drafter(); }
  [[nodiscard]] Target& target() { return session_.target(); }
  /// The session behind generate(): the round API (docs/decoder.md).
  [[nodiscard]] Session& session() { return session_; }

 private:
  Session session_;
};

}  // namespace specdec
