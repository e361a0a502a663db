#pragma once
// BatchedRounds: one round of several sequences at once, for a server's slots (or any driver of
// several conversations). Each sequence is its own SpeculativeSession with its own models (e.g.
// one cpu::Transformer per sequence over one WeightStore); a round of all of them is
//
//   1. propose, in steps: each session begins its round (chooses k); then, step by step, the
//      draft models of every session that still drafts run one batched forward
//      (draft_input() -> forward_batch -> draft_output(), each session drawing its own token);
//   2. one batched target forward over every session's [last token, x_1 .. x_k] (a tree round's
//      [last token, tree nodes] with its tree, where the model batches trees: cpu::Transformer);
//   3. accept(): each session verifies its own rows, rolls back, emits.
//
// A model type with a batched forward (a static M::forward_batch(models, inputs), as
// cpu::Transformer has) streams its weights once per step for all the sequences: two sequences'
// rounds then cost much less than two rounds. Other model types run their forwards one after
// the other, with the same results.
//
// Exactness: each session samples with its own sampler and Philox streams (its own seed) and
// verifies its own rows, so batching changes a sequence's tokens only if the backend's logits of
// a sequence depended on the other sequences of the forward. The CPU backend's do not (docs/
// cpu.md, batch invariance; forward_batch is bitwise each model's forward()), so every sequence
// gets exactly the tokens it would get alone (tests/decoder/test_batched.cpp).
//
// Faults stay with their sequence: a session whose round throws (NaN logits, a drafter error) is
// cancelled and reported with its exception; the others go on.

#include <algorithm>
#include <cstddef>
#include <exception>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"

namespace specdec {

/// Whether model type M has a batched forward over several sequences (one model each).
template <class M>
concept BatchedCausalLM = CausalLM<M> &&
    requires(std::span<M* const> models, std::span<const std::span<const token_t>> inputs) {
  { M::forward_batch(models, inputs) } -> std::same_as<std::vector<LogitsView>>;
};

/// Whether M's batched forward also scores token trees (cpu::Transformer): forward_batch(models,
/// inputs, trees), trees[i] the parents of inputs[i]'s tree or empty for a chain.
template <class M>
concept BatchedTreeCausalLM = BatchedCausalLM<M> && TreeCausalLM<M> &&
    requires(std::span<M* const> models, std::span<const std::span<const token_t>> inputs,
             std::span<const std::span<const std::int32_t>> trees) {
  { M::forward_batch(models, inputs, trees) } -> std::same_as<std::vector<LogitsView>>;
};

/// What one BatchedRounds::round() did.
struct BatchedRound {
  /// A session whose round threw: it was cancelled; `error` is what it threw.
  struct Failure {
    std::size_t index = 0;  ///< in the span passed to round()
    std::exception_ptr error;
  };
  std::size_t sequences = 0;    ///< sessions that took part (not done() when it began)
  std::size_t draft_steps = 0;  ///< batched draft forwards
  std::size_t draft_tokens = 0, target_tokens = 0;  ///< tokens of those forwards, in all
  double draft_seconds = 0;                         ///< time of the batched draft forwards
  double verify_seconds = 0;                        ///< time of the batched target forward
  std::vector<Failure> failures;
};

/// Runs rounds of several sessions together (see the top of this file). Session is a
/// SpeculativeSession over host models; the sessions must not share models.
template <class Session>
class BatchedRounds {
 public:
  using Target = std::remove_reference_t<decltype(std::declval<Session&>().target())>;
  static_assert(Session::Sampler::memory == Memory::host,
                "BatchedRounds drives sessions with host logits (a device batch is future work)");

  /// One round of every session of `sessions` that is not done(): batched draft steps, one
  /// batched target forward, then accept() in order (streaming each session's tokens through its
  /// callbacks). A session whose round throws is cancelled and reported in `failures`.
  BatchedRound round(std::span<Session* const> sessions) {
    BatchedRound report;
    live_.clear();
    for (std::size_t i = 0; i < sessions.size(); ++i)
      if (!sessions[i]->done()) live_.push_back(i);
    report.sequences = live_.size();
    if (live_.empty()) return report;

    // 1. Propose: begin every round, then the draft steps, batched across sessions.
    for_each_live(sessions, report, [](Session& s) { s.begin_propose(); });
    if constexpr (Session::kSteppedDraft) {
      using Draft = std::remove_reference_t<decltype(sessions[0]->drafter().model())>;
      for (;;) {
        std::vector<Draft*> models;
        std::vector<std::span<const token_t>> feeds;
        step_.clear();
        for_each_live(sessions, report, [&](Session& s, std::size_t i) {
          const std::span<const token_t> feed = s.draft_input();
          if (feed.empty()) return;
          models.push_back(&s.drafter().model());
          feeds.push_back(feed);
          step_.push_back(i);
        });
        if (step_.empty()) break;
        ++report.draft_steps;
        for (const auto& f : feeds) report.draft_tokens += f.size();
        run_forward<Draft>(sessions, report, models, feeds, report.draft_seconds,
                           [](Session& s, const LogitsView& rows, double seconds) {
                             s.draft_output(rows, seconds);
                           });
      }
    }

    // 2. The target forward of every session, batched (a tree round's tree too, where the
    // backend batches trees).
    std::vector<Target*> targets;
    std::vector<std::span<const token_t>> inputs;
    std::vector<std::span<const std::int32_t>> trees;  // per input: its tree's parents, or empty
    step_.clear();
    for_each_live(sessions, report, [&](Session& s, std::size_t i) {
      const TargetInput& input = s.end_propose();
      if constexpr (Session::kTreeCapable && BatchedTreeCausalLM<Target>) {
        if (s.tree_round()) {
          inputs.push_back(input.host);
          targets.push_back(&s.target());
          trees.push_back(s.tree_parents());
          step_.push_back(i);
          return;
        }
      } else if constexpr (Session::kTreeCapable) {
        if (s.tree_round()) {
          // A tree round on a backend without batched trees: its own forward_tree.
          double seconds = 0;
          LogitsView rows;
          {
            ScopedTimer timer(seconds);
            rows = s.forward(input);
          }
          report.verify_seconds += seconds;
          report.target_tokens += input.size();
          (void)s.accept(rows, seconds);
          return;
        }
      }
      inputs.push_back(input.host);
      targets.push_back(&s.target());
      trees.emplace_back();
      step_.push_back(i);
    });
    for (const auto& in : inputs) report.target_tokens += in.size();
    // 3. accept() each.
    run_forward<Target>(
        sessions, report, targets, inputs, report.verify_seconds,
        [](Session& s, const LogitsView& rows, double seconds) { (void)s.accept(rows, seconds); },
        trees);
    return report;
  }

 private:
  /// Calls fn(session) or fn(session, index) on each live session; one that throws is cancelled,
  /// reported and leaves the live set.
  template <class Fn>
  void for_each_live(std::span<Session* const> sessions, BatchedRound& report, Fn&& fn) {
    std::vector<std::size_t> still;
    for (const std::size_t i : live_) {
      try {
        if constexpr (std::is_invocable_v<Fn&, Session&, std::size_t>)
          fn(*sessions[i], i);
        else
          fn(*sessions[i]);
        still.push_back(i);
      } catch (...) {
        fail(sessions, report, i, std::current_exception());
      }
    }
    live_ = std::move(still);
  }

  /// The forward of models[j] over inputs[j] (session step_[j]), batched, then give(session,
  /// rows, seconds) for each; trees[j], where given and not empty, makes inputs[j] a token tree
  /// with those parents (BatchedTreeCausalLM models only). When a batched forward throws, each
  /// model is run alone so that only the sessions whose own forward fails are dropped (a
  /// refused batch changes no cache).
  template <class M, class Give>
  void run_forward(std::span<Session* const> sessions, BatchedRound& report,
                   const std::vector<M*>& models,
                   const std::vector<std::span<const token_t>>& inputs, double& seconds_total,
                   Give&& give, const std::vector<std::span<const std::int32_t>>& trees = {}) {
    if (models.empty()) return;
    const auto tree_of = [&](std::size_t j) {
      return trees.empty() ? std::span<const std::int32_t>() : trees[j];
    };
    std::vector<LogitsView> rows;
    double seconds = 0;
    bool batched = false;
    if constexpr (BatchedCausalLM<M>) {
      try {
        ScopedTimer timer(seconds);
        if constexpr (BatchedTreeCausalLM<M>) {  // trees empty or all empty: chains
          rows = M::forward_batch(std::span<M* const>(models), inputs, trees);
        } else {
          rows = M::forward_batch(std::span<M* const>(models), inputs);
        }
        batched = true;
      } catch (...) {  // below, alone: the failing sequence is found and dropped
      }
      seconds_total += seconds;
    }
    std::vector<std::size_t> dropped;
    for (std::size_t j = 0; j < models.size(); ++j) {
      const std::size_t i = step_[j];
      try {
        if (batched) {
          give(*sessions[i], rows[j], seconds);
        } else {
          double alone = 0;
          LogitsView row;
          {
            ScopedTimer timer(alone);
            if constexpr (TreeCausalLM<M>) {
              row = tree_of(j).empty() ? models[j]->forward(inputs[j])
                                       : models[j]->forward_tree(inputs[j], tree_of(j));
            } else {
              row = models[j]->forward(inputs[j]);
            }
          }
          seconds_total += alone;
          give(*sessions[i], row, alone);
        }
      } catch (...) {
        fail(sessions, report, i, std::current_exception());
        dropped.push_back(i);
      }
    }
    if (!dropped.empty())
      std::erase_if(live_, [&](std::size_t i) {
        return std::find(dropped.begin(), dropped.end(), i) != dropped.end();
      });
  }

  void fail(std::span<Session* const> sessions, BatchedRound& report, std::size_t i,
            std::exception_ptr error) {
    try {
      sessions[i]->cancel();
    } catch (...) {  // the original error is the one to report
    }
    report.failures.push_back({i, std::move(error)});
  }

  std::vector<std::size_t> live_;  // indices of the sessions still in this round
  std::vector<std::size_t> step_;  // the session of each model of the current forward
};

}  // namespace specdec
