#pragma once
// What a generation reports: why it stopped, counters and a time split (GenerationStats), and
// one record per speculative round (RoundRecord) from which a trace can be drawn.
//
// Every scalar statistic is reachable by name through GenerationStats::for_each_field, with the
// snake_case names the CLI prints in --json; add a field there when you add one here.

#include <chrono>
#include <cstddef>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"

namespace specdec {

/// Why generate() returned.
enum class StopReason {
  eos,           ///< the model produced the end-of-sequence token (not emitted)
  max_tokens,    ///< the token budget (GenerationConfig::max_new_tokens) is used up
  stop_string,   ///< the detokenized text contains one of GenerationConfig::stop_strings
  context_full,  ///< prompt + generated tokens fill the target's context window
  cancelled,     ///< Callbacks::should_stop returned true
};

[[nodiscard]] constexpr std::string_view to_string(StopReason r) {
  switch (r) {
    case StopReason::eos:
      return "eos";
    case StopReason::max_tokens:
      return "max_tokens";
    case StopReason::stop_string:
      return "stop_string";
    case StopReason::context_full:
      return "context_full";
    case StopReason::cancelled:
      return "cancelled";
  }
  return "unknown";
}

/// One round of speculative decoding, as the trace shows it. Drafted tokens x_1..x_k, of which
/// the first `accepted` were kept; then `next` (y): the token sampled from the residual
/// norm(max(0, p - q)) at the first rejected position (`bonus` false, `rejected` = the drafted
/// token that lost), or from the target's last row when every drafted token was accepted
/// (`bonus` true, `rejected` = -1). A round with no drafted tokens is a plain target step.
struct RoundRecord {
  std::size_t position = 0;      ///< sequence length (prompt + generated) when the round began
  std::size_t draft_length = 0;  ///< k asked of the drafter (after clamping to budget/context)
  std::vector<token_t> drafted;  ///< x_1..x_k' actually proposed (k' <= draft_length)
  /// A tree round (SpeculativeOptions::max_tree_nodes): `drafted` is the tree's nodes, node i
  /// after node tree_parents[i] (-1: after the sequence's last token), and accepted_nodes the
  /// path that was kept (`accepted` of them, root first). Empty for a chain.
  std::vector<std::int32_t> tree_parents;
  std::vector<std::size_t> accepted_nodes;
  std::size_t accepted = 0;  ///< n: x_1..x_n accepted
  token_t rejected = -1;     ///< x_(n+1) when n < k', else -1
  token_t next = -1;         ///< y: residual (correction) or bonus token
  bool bonus = false;        ///< n == k' (y came from the target's last row)
  std::size_t emitted = 0;   ///< tokens of x_1..x_n, y actually emitted (a stop may cut)
  /// p(x_i) and q(x_i) of x_1..x_k' under the processed distributions: the two numbers the
  /// acceptance test min(1, p / q) compared (q = 1 for a point-mass drafter such as n-gram
  /// lookup). Empty when the sampler does not report them (the device sampler) or k' = 0.
  std::vector<float> p_drafted, q_drafted;
  double draft_seconds = 0;     ///< draft model forwards of this round
  double verify_seconds = 0;    ///< the target forward of this round
  double sampling_seconds = 0;  ///< logit processing, draft sampling and verify_chain
};

/// Counters and timings of one generate() call. Times are wall-clock seconds.
struct GenerationStats {
  std::size_t prompt_tokens = 0;
  std::size_t tokens_emitted = 0;    ///< generated tokens returned (EOS excluded)
  std::size_t rounds = 0;            ///< speculative rounds (autoregressive: one per step)
  std::size_t target_passes = 0;     ///< target forward calls after the prefill (one per round)
  std::size_t draft_passes = 0;      ///< draft model forward calls after the prefill
  std::size_t drafted = 0;           ///< tokens proposed by the drafter
  std::size_t accepted = 0;          ///< of those, accepted by the verifier
  double acceptance_rate = 0;        ///< accepted / drafted (0 when nothing was drafted)
  double mean_tokens_per_round = 0;  ///< tokens_emitted / rounds
  /// accepted_histogram[n] = rounds with a non-empty draft in which exactly n tokens were
  /// accepted (size: the longest draft + 1). Rounds without a draft are not counted here.
  std::vector<std::size_t> accepted_histogram;
  double prefill_seconds = 0;    ///< prompt prefill of both models
  double draft_seconds = 0;      ///< draft model forwards (decode phase)
  double verify_seconds = 0;     ///< target forwards (decode phase)
  double sampling_seconds = 0;   ///< logit processing, sampling, verify_chain (both models)
  double other_seconds = 0;      ///< the rest of the decode phase: bookkeeping, detokenizing,
                                 ///< stop strings, callbacks, KV rollbacks
  double decode_seconds = 0;     ///< decode phase: everything after the prefill
  double total_seconds = 0;      ///< prefill + decode
  double tokens_per_second = 0;  ///< tokens_emitted / decode_seconds (prefill excluded)

  /// Recomputes the derived fields (rates, other_seconds) from the counters and timers.
  void finalize() {
    acceptance_rate = drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
    mean_tokens_per_round =
        rounds ? static_cast<double>(tokens_emitted) / static_cast<double>(rounds) : 0.0;
    other_seconds = decode_seconds - draft_seconds - verify_seconds - sampling_seconds;
    if (other_seconds < 0) other_seconds = 0;  // timer granularity
    total_seconds = prefill_seconds + decode_seconds;
    tokens_per_second =
        decode_seconds > 0 ? static_cast<double>(tokens_emitted) / decode_seconds : 0.0;
  }

  /// Calls f(name, value) for every scalar field, in declaration order, with its snake_case
  /// name; value is std::size_t or double. The histogram is not included (it is a vector).
  template <class F>
  void for_each_field(F&& f) const {
    f(std::string_view{"prompt_tokens"}, prompt_tokens);
    f(std::string_view{"tokens_emitted"}, tokens_emitted);
    f(std::string_view{"rounds"}, rounds);
    f(std::string_view{"target_passes"}, target_passes);
    f(std::string_view{"draft_passes"}, draft_passes);
    f(std::string_view{"drafted"}, drafted);
    f(std::string_view{"accepted"}, accepted);
    f(std::string_view{"acceptance_rate"}, acceptance_rate);
    f(std::string_view{"mean_tokens_per_round"}, mean_tokens_per_round);
    f(std::string_view{"prefill_seconds"}, prefill_seconds);
    f(std::string_view{"draft_seconds"}, draft_seconds);
    f(std::string_view{"verify_seconds"}, verify_seconds);
    f(std::string_view{"sampling_seconds"}, sampling_seconds);
    f(std::string_view{"other_seconds"}, other_seconds);
    f(std::string_view{"decode_seconds"}, decode_seconds);
    f(std::string_view{"total_seconds"}, total_seconds);
    f(std::string_view{"tokens_per_second"}, tokens_per_second);
  }

  /// Counts a round with a non-empty draft of k' tokens of which n were accepted.
  void count_draft(std::size_t drafted_tokens, std::size_t accepted_tokens) {
    drafted += drafted_tokens;
    accepted += accepted_tokens;
    if (accepted_histogram.size() < drafted_tokens + 1)
      accepted_histogram.resize(drafted_tokens + 1);
    ++accepted_histogram[accepted_tokens];
  }
};

/// A stopwatch that adds the time between construction and stop() (or destruction) to a total.
class ScopedTimer {
 public:
  using clock = std::chrono::steady_clock;
  explicit ScopedTimer(double& total) : total_(&total), start_(clock::now()) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  ~ScopedTimer() { stop(); }
  /// Adds the elapsed time once and returns it; later calls add nothing.
  double stop() {
    if (!total_) return 0;
    const double s = std::chrono::duration<double>(clock::now() - start_).count();
    *total_ += s;
    total_ = nullptr;
    return s;
  }

 private:
  double* total_;
  clock::time_point start_;
};

}  // namespace specdec
