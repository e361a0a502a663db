#pragma once
// The cost of a speculative round, measured on the machine and models at hand.
//
// A round that drafts k tokens with a draft model costs
//     k draft steps + one target forward over k + 1 tokens (+ sampling, small on the host),
// i.e. C(k) = (T(k+1) + k D) / T(1) target steps, where T(n) is the time of a target forward over
// n tokens and D the time of one draft step (a forward over one token). A model-free drafter
// (prompt lookup) has D = 0. With a per-token acceptance a, the round emits
// E(k) = 1 + a + ... + a^k tokens, so the speedup over target-only decoding is E(k) / C(k)
// (docs/benchmarks.md compares this prediction with what `specdec bench` measures).
//
// measure_forward_times() times the forwards once, before decoding (a few repeats, the median),
// and round_costs() turns them into the C(k) that AdaptiveDraftLength::Options::round_cost takes:
// fixed for the whole run, so a seeded run stays reproducible.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"

namespace specdec {

/// Measured forward times, in seconds.
struct ForwardTimes {
  std::vector<double> target;  ///< [max_k + 1]: target[n - 1] = T(n), a forward over n tokens
  double draft = 0;            ///< D: one draft step (0 for a model-free drafter)
};

namespace detail {

/// Median seconds of `model.forward` over n tokens appended after `context` cached positions,
/// over `repeats` runs (the cache is rolled back after each). Each run starts with the model idle
/// and ends at its completion point (specdec::synchronize): a device model's forward() returns
/// once its work is enqueued, and a host clock read then would time the launches.
template <CausalLM M>
double time_forward(M& model, std::size_t context, std::size_t n, std::size_t repeats) {
  const std::vector<token_t> tokens(n, token_t{0});
  std::vector<double> seconds;
  for (std::size_t r = 0; r < repeats; ++r) {
    specdec::synchronize(model);
    const auto start = std::chrono::steady_clock::now();
    (void)model.forward(tokens);
    specdec::synchronize(model);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    model.rollback(context);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace detail

/// Times T(1) .. T(max_k + 1) on `target` and one step of `draft` (when not null), each after a
/// context of `context` positions, fewer where a model's cache is shorter (token 0 repeated: the
/// cost of a step does not depend on the token ids), `repeats` times, the median. Leaves both
/// caches empty. The models must be idle (no sequence in progress). Throws specdec::Error when
/// max_k + 1 tokens do not fit in the target's cache.
template <CausalLM Target, CausalLM Draft>
ForwardTimes measure_forward_times(Target& target, Draft* draft, std::size_t max_k,
                                   std::size_t context = 128, std::size_t repeats = 7) {
  if (repeats == 0) throw Error("measure_forward_times: repeats must be >= 1");
  if (max_k + 1 > target.context_length() || (draft && draft->context_length() == 0))
    throw Error("measure_forward_times: " + std::to_string(max_k + 1) +
                " tokens do not fit in the target's cache of " +
                std::to_string(target.context_length()) + " positions");
  context = std::min(context, target.context_length() - (max_k + 1));
  if (draft) context = std::min(context, draft->context_length() - 1);
  ForwardTimes times;
  const std::vector<token_t> prefix(context, token_t{0});
  target.rollback(0);
  if (context > 0) (void)target.forward(prefix);
  (void)detail::time_forward(target, context, 1, 2);  // warm-up: pages, caches, thread choice
  for (std::size_t n = 1; n <= max_k + 1; ++n)
    times.target.push_back(detail::time_forward(target, context, n, repeats));
  target.rollback(0);
  if (draft) {
    draft->rollback(0);
    if (context > 0) (void)draft->forward(prefix);
    (void)detail::time_forward(*draft, context, 1, 2);
    times.draft = detail::time_forward(*draft, context, 1, repeats);
    draft->rollback(0);
  }
  return times;
}

/// C(k) = (T(k+1) + k D) / T(1) for k = 0 .. max_k (times.target must hold max_k + 1 entries):
/// what AdaptiveDraftLength::Options::round_cost takes.
inline std::vector<double> round_costs(const ForwardTimes& times, std::size_t max_k) {
  if (times.target.size() <= max_k || !(times.target[0] > 0))
    throw Error("round_costs: need T(1) .. T(max_k + 1), T(1) > 0");
  std::vector<double> cost(max_k + 1);
  for (std::size_t k = 0; k <= max_k; ++k)
    cost[k] = (times.target[k] + static_cast<double>(k) * times.draft) / times.target[0];
  return cost;
}

}  // namespace specdec
