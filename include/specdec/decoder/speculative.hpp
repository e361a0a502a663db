#pragma once
// SpeculativeDecoder<Draft, Target>: exact speculative decoding.
//
// One round (docs/decoder.md has the full bookkeeping, with the positions each model holds):
//   1. Draft: the drafter proposes x_1 .. x_k (and, for a draft model, keeps q_1 .. q_k).
//   2. Verify: target.forward([last token of the sequence, x_1 .. x_k]) -> k+1 rows of logits,
//      processed into p_0 .. p_k with the same SamplingParams as q.
//   3. verify_chain(p, q, x) -> n accepted and the next token y (residual sample at the first
//      rejection, or bonus token from p_k when all k are accepted).
//   4. Emit x_1 .. x_n, y. The target's cache is cut back to the sequence before the round plus
//      x_1 .. x_n; y is the first token of the next verify. The drafter is told that only that
//      much of the sequence is valid (a draft model then holds it up to x_min(n, k-1)).
//
// Draft is either a Drafter (NGramDrafter, a ModelDrafter, your own) or any CausalLM, which is
// wrapped in a ModelDrafter.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec {

/// How many tokens to draft per round.
struct SpeculativeOptions {
  std::size_t k = 4;      ///< fixed draft length (ignored when adaptive)
  bool adaptive = false;  ///< choose k each round with AdaptiveDraftLength
  AdaptiveDraftLength::Options adaptive_options{};
};

namespace detail {
/// The drafter a SpeculativeDecoder<Draft, ...> holds: a reference to a Drafter, or a
/// ModelDrafter around a model.
template <class Draft>
struct DrafterHolder {
  explicit DrafterHolder(Draft& d) : drafter(&d) {}
  Draft& get() { return *drafter; }
  Draft* drafter;
};
template <class Draft>
requires(!Drafter<Draft> && CausalLM<Draft>) struct DrafterHolder<Draft> {
  explicit DrafterHolder(Draft& d) : drafter(d) {}
  ModelDrafter<Draft>& get() { return drafter; }
  ModelDrafter<Draft> drafter;
};
}  // namespace detail

template <class Draft, CausalLM Target>
requires(Drafter<Draft> || CausalLM<Draft>) class SpeculativeDecoder {
 public:
  /// The draft and target (and tokenizers, optional) must outlive the decoder. `tokenizer` is
  /// the target's: used for the streamed text, stop strings and the EOS id. When the draft's
  /// tokenizer is given as well it must have the same vocabulary size. Throws specdec::Error
  /// when the draft's and target's vocabulary sizes differ.
  SpeculativeDecoder(Draft& draft, Target& target, SpeculativeOptions options = {},
                     const Tokenizer* tokenizer = nullptr,
                     const Tokenizer* draft_tokenizer = nullptr)
      : drafter_(draft), target_(&target), options_(options), tokenizer_(tokenizer) {
    if (static_cast<const void*>(&draft) == static_cast<const void*>(&target))
      throw Error(
          "SpeculativeDecoder: the draft and the target are the same object (their KV "
          "caches would clash); construct a second model on the same weights instead");
    const std::size_t draft_vocab = drafter_.get().vocab_size();
    if (draft_vocab != 0 && draft_vocab != target_->vocab_size())
      throw Error("SpeculativeDecoder: the draft's vocabulary has " + std::to_string(draft_vocab) +
                  " tokens but the target's has " + std::to_string(target_->vocab_size()) +
                  ": the pair must share one vocabulary");
    if (tokenizer && draft_tokenizer && tokenizer->vocab_size() != draft_tokenizer->vocab_size())
      throw Error("SpeculativeDecoder: the draft's tokenizer has " +
                  std::to_string(draft_tokenizer->vocab_size()) + " tokens but the target's has " +
                  std::to_string(tokenizer->vocab_size()) + ": the pair must share one tokenizer");
    if (tokenizer && tokenizer->vocab_size() > target_->vocab_size())
      throw Error("SpeculativeDecoder: the tokenizer has " +
                  std::to_string(tokenizer->vocab_size()) + " tokens, the target only " +
                  std::to_string(target_->vocab_size()));
    if (!options_.adaptive && options_.k == 0)
      throw Error("SpeculativeDecoder: the draft length k must be >= 1");
    if (options_.adaptive) (void)AdaptiveDraftLength(options_.adaptive_options);  // validates
  }

  /// Generates a continuation of `prompt` (token ids, BOS included if the model wants one).
  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
    auto& drafter = drafter_.get();
    Target& target = *target_;
    const std::size_t vocab = target.vocab_size();
    const std::size_t context = target.context_length();
    const sampling::SamplingParams& params = config.sampling;
    sampling::validate(params);
    detail::check_request(prompt, context, vocab, config, tokenizer_);

    GenerationResult result;
    GenerationStats& stats = result.stats;
    stats.prompt_tokens = prompt.size();
    detail::Emitter out(prompt, config, tokenizer_, callbacks, result);
    sampling::PhiloxStream target_rng(config.seed, kTargetStream);
    sampling::PhiloxStream draft_rng(config.seed, kDraftStream);
    std::optional<AdaptiveDraftLength> adaptive;
    if (options_.adaptive) adaptive.emplace(options_.adaptive_options);

    DraftProposal proposal;
    std::vector<token_t> verify_input;  // [k'+1]: last token of the sequence, x_1 .. x_k'
    std::vector<float> p;               // [(k'+1) x V] processed target distributions

    // Prefill: both models consume the prompt minus its last token, which is the first token
    // of the first verify (and the draft's first feed).
    {
      ScopedTimer timer(stats.prefill_seconds);
      target.rollback(0);
      if (prompt.size() > 1) {
        const LogitsView logits = target.forward(prompt.first(prompt.size() - 1));
        detail::check_logits(logits, prompt.size() - 1, vocab, "target (prefill)");
      }
      drafter.start(prompt);
    }

    ScopedTimer decode_timer(stats.decode_seconds);
    while (!out.stopped()) {
      if (callbacks.should_stop && callbacks.should_stop()) {
        out.finish(StopReason::cancelled);
        break;
      }
      const std::vector<token_t>& sequence = out.sequence();
      const std::size_t length = sequence.size();
      if (length >= context) {  // not one more token fits in the target's context
        out.finish(StopReason::context_full);
        break;
      }
      if (target.cached() + 1 != length)
        throw Error("SpeculativeDecoder: the target's cache (" + std::to_string(target.cached()) +
                    " positions) is out of step with the sequence (" + std::to_string(length) +
                    " tokens): was the model used elsewhere meanwhile?");

      // The draft length: the rule's k, cut so that the round cannot emit more than the budget
      // (it emits at most k + 1 tokens), cannot overflow the target's context (the verify ends
      // at position length + k - 1 and y lands at position length + k), nor the draft's.
      const std::size_t wanted = adaptive ? adaptive->next() : options_.k;
      const std::size_t k =
          std::min({wanted, out.remaining() - 1, context - length - 1, drafter.max_draft(length)});

      RoundRecord round;
      round.position = length;
      round.draft_length = k;

      // 1. Draft.
      {
        double seconds = 0;
        ScopedTimer timer(seconds);
        drafter.draft(std::span<const token_t>(sequence), k, params, draft_rng, proposal);
        timer.stop();
        round.draft_seconds = seconds - proposal.sampling_seconds;
        round.sampling_seconds += proposal.sampling_seconds;
      }
      const std::span<const token_t> drafted(proposal.tokens);
      const std::size_t k_drafted = drafted.size();
      if (k_drafted > k)
        throw Error("SpeculativeDecoder: the drafter proposed " + std::to_string(k_drafted) +
                    " tokens, more than the " + std::to_string(k) + " asked for");
      const bool point_mass = proposal.q.empty();
      if (!point_mass && proposal.q.size() != k_drafted * vocab)
        throw Error("SpeculativeDecoder: the drafter's q has " + std::to_string(proposal.q.size()) +
                    " entries, expected " + std::to_string(k_drafted) + " x " +
                    std::to_string(vocab));

      // 2. Verify: one target forward over the last token and the drafted ones.
      verify_input.assign(1, sequence.back());
      verify_input.insert(verify_input.end(), drafted.begin(), drafted.end());
      for (const token_t x : drafted)
        if (x < 0 || static_cast<std::size_t>(x) >= vocab)
          throw Error("SpeculativeDecoder: the drafter proposed token " + std::to_string(x) +
                      ", outside the target's vocabulary (" + std::to_string(vocab) + ")");
      LogitsView logits;
      {
        ScopedTimer timer(round.verify_seconds);
        logits = target.forward(std::span<const token_t>(verify_input));
        detail::check_logits(logits, k_drafted + 1, vocab, "target");
      }

      // 3. Process the k'+1 rows and verify.
      sampling::VerifyResult verdict{0, -1};
      {
        ScopedTimer timer(round.sampling_seconds);
        p.resize((k_drafted + 1) * vocab);
        if (k_drafted == 0) {
          verdict.next = detail::sample_token(logits.row(0), params, p, target_rng);
        } else {
          for (std::size_t r = 0; r <= k_drafted; ++r)
            sampling::process_logits<float>(logits.row(r), params,
                                            std::span<float>(p.data() + r * vocab, vocab));
          const std::span<const float> p_rows(p);
          if (params.greedy())
            verdict = sampling::verify_chain_greedy<float>(p_rows, drafted, vocab);
          else if (point_mass)
            verdict = sampling::verify_chain_onehot<float>(p_rows, drafted, vocab, target_rng);
          else
            verdict = sampling::verify_chain<float>(p_rows, std::span<const float>(proposal.q),
                                                    drafted, vocab, target_rng);
        }
      }
      const std::size_t n = verdict.accepted;

      // 4. Roll back to the accepted prefix: the target consumed the last token and x_1 .. x_k';
      // it keeps the sequence plus x_1 .. x_n (y is fed by the next verify).
      if (target.cached() > length + n) target.rollback(length + n);
      drafter.keep(length + n);

      ++stats.rounds;
      ++stats.target_passes;
      stats.draft_passes += proposal.forward_passes;
      if (k_drafted > 0) stats.count_draft(k_drafted, n);
      if (adaptive) adaptive->update(k_drafted, n);
      stats.draft_seconds += round.draft_seconds;
      stats.verify_seconds += round.verify_seconds;
      stats.sampling_seconds += round.sampling_seconds;

      round.drafted.assign(drafted.begin(), drafted.end());
      round.accepted = n;
      round.rejected = n < k_drafted ? drafted[n] : -1;
      round.next = verdict.next;
      round.bonus = n == k_drafted;

      // Emit x_1 .. x_n, y; a stop (EOS, budget, stop string) may end the round early.
      const std::size_t before = result.tokens.size();
      for (std::size_t i = 0; i <= n; ++i)
        if (!out.emit(i < n ? drafted[i] : verdict.next)) break;
      round.emitted = result.tokens.size() - before;
      if (callbacks.on_round) callbacks.on_round(round);
      if (config.record_rounds) result.rounds.push_back(std::move(round));
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
    if (!tokenizer_) throw Error("SpeculativeDecoder: a text prompt needs a tokenizer");
    const std::vector<token_t> ids = tokenizer_->encode(prompt, true);
    return generate(std::span<const token_t>(ids), config, callbacks);
  }

  [[nodiscard]] const SpeculativeOptions& options() const { return options_; }
  void set_options(const SpeculativeOptions& options) {
    if (!options.adaptive && options.k == 0)
      throw Error("SpeculativeDecoder: the draft length k must be >= 1");
    options_ = options;
  }
  [[nodiscard]] const Tokenizer* tokenizer() const { return tokenizer_; }
  [[nodiscard]] auto& drafter() { return drafter_.get(); }
  [[nodiscard]] Target& target() { return *target_; }

 private:
  detail::DrafterHolder<Draft> drafter_;
  Target* target_;
  SpeculativeOptions options_;
  const Tokenizer* tokenizer_;
};

}  // namespace specdec
