#pragma once
// Log-probabilities of emitted tokens and their most likely alternatives, read from a row's
// distribution (the target's processed row: HostSampler, GenerationConfig::logprobs).
//
// The alternatives are the n tokens of the row with the largest logits (ties: the lower id
// first). Under the processing of process.hpp a kept token's probability increases with its
// logit, and every filter removes a tail of that order, so these are the n most likely tokens;
// the ones the filters removed (probability 0, log-probability -inf) are left out, so `top` may
// hold fewer than n entries.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec::sampling {

/// One alternative: a token and its log-probability (natural log).
struct TopLogprob {
  token_t token = 0;
  float logprob = 0;
  bool operator==(const TopLogprob&) const = default;
};

/// An emitted token's log-probability and the row's most likely tokens (most likely first).
struct TokenLogprob {
  token_t token = 0;
  float logprob = 0;
  std::vector<TopLogprob> top{};
  bool operator==(const TokenLogprob&) const = default;
};

/// The ids of the n largest entries of `row` (n <= row.size()), largest first, the lower id
/// first among equal values. Two reads of the row: the n-th largest value (detail::kth_largest),
/// then the ids at or above it.
inline std::vector<std::uint32_t> top_n_ids(std::span<const float> row, std::size_t n,
                                            std::vector<float>& buffer) {
  std::vector<std::uint32_t> ids;
  if (n == 0 || row.empty()) return ids;
  n = std::min(n, row.size());
  const float threshold = detail::kth_largest(row.data(), row.size(), n, buffer);
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] >= threshold) ids.push_back(static_cast<std::uint32_t>(i));
  std::sort(ids.begin(), ids.end(), [&](std::uint32_t a, std::uint32_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  });
  ids.resize(n);
  return ids;
}

/// The TokenLogprob of `token` in a row of `logits` whose distribution is prob(i) (a callable,
/// e.g. ProcessedRow::prob), with the top_n most likely tokens of nonzero probability.
template <class Prob>
TokenLogprob token_logprob(std::span<const float> logits, token_t token, std::size_t top_n,
                           Prob&& prob, std::vector<float>& buffer) {
  const auto log_of = [&](std::size_t i) {
    return static_cast<float>(std::log(static_cast<double>(prob(i))));
  };
  TokenLogprob out;
  out.token = token;
  out.logprob = log_of(static_cast<std::size_t>(token));
  for (const std::uint32_t id : top_n_ids(logits, top_n, buffer)) {
    if (!(static_cast<double>(prob(id)) > 0)) break;  // the rest were filtered out too
    out.top.push_back({static_cast<token_t>(id), log_of(id)});
  }
  return out;
}

}  // namespace specdec::sampling
