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
#include <span>
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

/// Seconds of one `model.forward` over n tokens appended after `context` cached positions (the
/// cache is rolled back after it). The run starts with the model idle and ends at its completion
/// point (specdec::synchronize): a device model's forward() returns once its work is enqueued,
/// and a host clock read then would time the launches.
template <CausalLM M>
double time_forward_once(M& model, std::size_t context, std::size_t n) {
  const std::vector<token_t> tokens(n, token_t{0});
  specdec::synchronize(model);
  const auto start = std::chrono::steady_clock::now();
  (void)model.forward(tokens);
  specdec::synchronize(model);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  model.rollback(context);
  return seconds;
}

/// The median of `repeats` forwards over n tokens (time_forward_once).
template <CausalLM M>
double time_forward(M& model, std::size_t context, std::size_t n, std::size_t repeats) {
  std::vector<double> seconds;
  for (std::size_t r = 0; r < repeats; ++r) seconds.push_back(time_forward_once(model, context, n));
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

/// The median of `repeats` sweeps: each sweep times one forward of every size in `sizes` (n
/// tokens), so that a drift of the machine (memory bandwidth changes minute to minute) shifts
/// every size alike instead of the sizes timed last. Two untimed sweeps first: pages, caches,
/// and the backend's choice of threads per step size (the CPU backend measures both ways first).
template <CausalLM M>
std::vector<double> time_forwards(M& model, std::size_t context, std::span<const std::size_t> sizes,
                                  std::size_t repeats) {
  std::vector<std::vector<double>> seconds(sizes.size());
  for (std::size_t r = 0; r < repeats + 2; ++r)
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const double s = time_forward_once(model, context, sizes[i]);
      if (r >= 2) seconds[i].push_back(s);
    }
  std::vector<double> median(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::sort(seconds[i].begin(), seconds[i].end());
    median[i] = seconds[i][seconds[i].size() / 2];
  }
  return median;
}

}  // namespace detail

/// Times T(1) .. T(max_k + 1) on `target` and one step of `draft` (when not null), each after a
/// context of `context` positions, fewer where a model's cache is shorter (token 0 repeated: the
/// cost of a step does not depend on the token ids): the median of `repeats` interleaved sweeps
/// over the sizes (detail::time_forwards). Leaves both
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
  std::vector<std::size_t> sizes(max_k + 1);
  for (std::size_t n = 1; n <= max_k + 1; ++n) sizes[n - 1] = n;
  times.target =
      detail::time_forwards(target, context, std::span<const std::size_t>(sizes), repeats);
  target.rollback(0);
  if (draft) {
    draft->rollback(0);
    if (context > 0) (void)draft->forward(prefix);
    const std::size_t one = 1;
    times.draft =
        detail::time_forwards(*draft, context, std::span<const std::size_t>(&one, 1), repeats)[0];
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
