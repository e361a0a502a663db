#pragma once
// What the HTML trace and --json show per drafted token x: the target's probability p(x) and the
// draft's q(x), the two numbers the acceptance test min(1, p(x) / q(x)) compares. The decoder
// keeps neither in its RoundRecord, so the CLI wraps the two sides it hands to the decoder:
//
//  - ProbabilityRecorder<M> is the target: a CausalLM that forwards every call to the model and,
//    when recording, keeps p(t_(r+1)) from row r of each forward over tokens t_0 .. t_n. For a
//    verify over [last token, x_1 .. x_k] that is p(x_1) .. p(x_k), computed with the decoder's
//    own logit processing (sampling::process_logits, same parameters), so the numbers are the
//    ones the decoder compared.
//  - DraftWindow<D> is the drafter: it forwards to the real one, keeps q(x_i) from the
//    proposal's rows (1 for a deterministic drafter such as the n-gram one: q is a point mass),
//    and drops proposals shorter than --draft-min (llama.cpp's rule: the round is then a plain
//    target step, which keeps the output exact).

#include <cstddef>
#include <span>
#include <vector>

#include "specdec/decoder/drafters.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec::cli {

template <CausalLM M>
class ProbabilityRecorder {
 public:
  /// Verify steps have k + 1 <= 257 tokens (-k is at most 256); longer forwards are prompt
  /// prefills, whose rows nobody asked about.
  static constexpr std::size_t kMaxRecordedTokens = 257;

  explicit ProbabilityRecorder(M& model) : model_(&model) {}

  /// Starts recording with these parameters (the generation's); nullptr: off.
  void record(const sampling::SamplingParams* params) { params_ = params; }
  /// p(t_(r+1)) for r = 0 .. n-1 of the last forward over n + 1 tokens, when recording.
  [[nodiscard]] std::span<const float> last_p() const { return p_; }

  [[nodiscard]] std::size_t vocab_size() const { return model_->vocab_size(); }
  [[nodiscard]] std::size_t context_length() const { return model_->context_length(); }
  [[nodiscard]] std::size_t cached() const { return model_->cached(); }
  void rollback(std::size_t n) { model_->rollback(n); }

  LogitsView forward(std::span<const token_t> tokens) {
    const LogitsView logits = model_->forward(tokens);
    p_.clear();
    if (params_ != nullptr && tokens.size() <= kMaxRecordedTokens && logits.where == Memory::host &&
        logits.rows == tokens.size()) {
      probs_.resize(logits.vocab);  // [V] one processed row at a time
      for (std::size_t r = 0; r + 1 < tokens.size(); ++r) {
        sampling::process_logits<float>(logits.row(r), *params_, probs_);
        p_.push_back(probs_[static_cast<std::size_t>(tokens[r + 1])]);
      }
    }
    return logits;
  }

 private:
  M* model_;
  const sampling::SamplingParams* params_ = nullptr;
  std::vector<float> p_;      // [tokens - 1]
  std::vector<float> probs_;  // [V]
};

template <Drafter D>
class DraftWindow {
 public:
  DraftWindow(D& drafter, std::size_t min_tokens) : drafter_(&drafter), min_tokens_(min_tokens) {}

  void record(bool on) { record_ = on; }
  /// q(x_i) of the last proposal's tokens, when recording.
  [[nodiscard]] std::span<const float> last_q() const { return q_; }

  [[nodiscard]] std::size_t vocab_size() const { return drafter_->vocab_size(); }
  [[nodiscard]] std::size_t max_draft(std::size_t n) const { return drafter_->max_draft(n); }
  void start(std::span<const token_t> prompt) { drafter_->start(prompt); }
  void keep(std::size_t n) { drafter_->keep(n); }

  void draft(std::span<const token_t> sequence, std::size_t k,
             const sampling::SamplingParams& params, sampling::PhiloxStream& rng,
             DraftProposal& out) {
    drafter_->draft(sequence, k, params, rng, out);
    if (out.tokens.size() < min_tokens_) {  // keeps forward_passes: that work was done
      out.tokens.clear();
      out.q.clear();
    }
    q_.clear();
    if (!record_) return;
    const std::size_t vocab = drafter_->vocab_size();
    for (std::size_t i = 0; i < out.tokens.size(); ++i)
      q_.push_back(out.q.empty() ? 1.0f
                                 : out.q[i * vocab + static_cast<std::size_t>(out.tokens[i])]);
  }

 private:
  D* drafter_;
  std::size_t min_tokens_;
  bool record_ = false;
  std::vector<float> q_;  // [tokens of the last proposal]
};

}  // namespace specdec::cli
