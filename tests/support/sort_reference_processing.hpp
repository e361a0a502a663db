#pragma once
// The logit processing as it was written before the row plans of process.hpp (commit daaa9ac):
// std::exp per entry, nth_element for top-k, a sort of every token that can be in the nucleus
// for top-p, sequential double sums. It is the sort-based reference of the large-vocabulary
// tests (tests/sampling/test_process.cpp: the kept sets must be equal) and the "before" of
// bench/bench_sampling.cpp (BM_process, BM_round).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/sampling/process.hpp"

namespace specdec::test {

/// probs = the processed distribution of `logits` (finite, V > 0 entries; params valid), by
/// full selection and sorting.
template <class Real>
void sort_reference_process(std::span<const float> logits, const sampling::SamplingParams& params,
                            std::span<Real> probs) {
  const std::size_t vocab = logits.size();
  if (params.greedy()) {
    std::fill(probs.begin(), probs.end(), Real(0));
    probs[sampling::argmax(logits)] = Real(1);
    return;
  }
  for (std::size_t i = 0; i < vocab; ++i)
    probs[i] = sampling::tempered_logit<Real>(logits[i], params.temperature);
  const Real s_max = probs[sampling::argmax_row(probs.data(), vocab)];
  std::vector<unsigned char> kept(vocab, 1);
  const auto top_k = static_cast<std::size_t>(params.top_k);
  if (top_k > 0 && top_k < vocab) {
    std::vector<Real> sorted(probs.begin(), probs.end());
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(top_k - 1),
                     sorted.end(), [](Real a, Real b) { return a > b; });
    const Real kth = sorted[top_k - 1];
    for (std::size_t i = 0; i < vocab; ++i) kept[i] = probs[i] >= kth;
  }
  double total = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    probs[i] = kept[i] ? std::exp(probs[i] - s_max) : Real(0);
    total += static_cast<double>(probs[i]);
  }
  if (params.top_p < 1.0f) {
    const double cut =
        (1.0 - static_cast<double>(params.top_p)) / static_cast<double>(vocab) * total;
    std::vector<std::uint32_t> order;
    for (std::size_t i = 0; i < vocab; ++i) {
      if (static_cast<double>(probs[i]) >= cut && probs[i] > Real(0)) {
        order.push_back(static_cast<std::uint32_t>(i));
      } else {
        kept[i] = 0;
      }
    }
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
    });
    const double need = static_cast<double>(params.top_p) * total;
    double before = 0;
    for (const std::uint32_t i : order) {
      if (before < need) {
        before += static_cast<double>(probs[i]);
      } else {
        kept[i] = 0;
      }
    }
  }
  if (params.min_p > 0.0f) {
    const auto threshold = static_cast<Real>(params.min_p);
    for (std::size_t i = 0; i < vocab; ++i) {
      if (probs[i] < threshold) kept[i] = 0;
    }
  }
  total = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    if (!kept[i]) probs[i] = Real(0);
    total += static_cast<double>(probs[i]);
  }
  const double scale = 1.0 / total;
  for (std::size_t i = 0; i < vocab; ++i)
    probs[i] = static_cast<Real>(static_cast<double>(probs[i]) * scale);
}

}  // namespace specdec::test
