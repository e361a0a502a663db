#pragma once
// Logits -> the processed probability distribution that is sampled (and verified) from.
//
// The same processing is applied to the target's and the draft's logits; speculative sampling
// is then exact with respect to the target's PROCESSED distribution, which is exactly the law of
// plain sampling with the same settings (docs/math.md).
//
// Order of operations (the Hugging Face transformers order: TemperatureLogitsWarper,
// TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper; vLLM does the same):
//   1. temperature: s_i = logit_i / T;
//   2. top-k: keep the tokens whose s_i is >= the k-th largest s (ties at the boundary are kept,
//      as in transformers), top_k = 0 or top_k >= V keeps all;
//   3. top-p: softmax over the kept tokens, sort by probability (descending, lower index first on
//      ties) and keep a token while the mass of the tokens before it is < top_p: the smallest
//      prefix whose mass reaches top_p. top_p = 1 keeps all;
//   4. min-p: keep the tokens whose probability (renormalised over what is kept) is >= min_p times
//      the largest probability. min_p = 0 keeps all;
//   5. the kept tokens' probabilities are renormalised to sum to 1; the others are exactly 0.
// llama.cpp's default sampler chain applies temperature LAST (after top-k/top-p/min-p); that
// gives different top-p/min-p sets for T != 1. We follow transformers because it is the
// reference the fixtures of tests/sampling are generated with (tools/gen_sampling_fixtures.py).
//
// temperature <= 0 means greedy: a one-hot distribution at the argmax of the logits (the lowest
// index wins ties). The filters never remove the argmax, so greedy ignores them.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "specdec/common.hpp"

namespace specdec::sampling {

/// How logits become a distribution. The defaults are plain softmax sampling.
struct SamplingParams {
  float temperature = 1.0f;  ///< <= 0: greedy (argmax)
  int top_k = 0;             ///< 0: off
  float top_p = 1.0f;        ///< in (0, 1]; 1: off
  float min_p = 0.0f;        ///< in [0, 1]; 0: off

  [[nodiscard]] constexpr bool greedy() const { return temperature <= 0.0f; }
};

/// Throws specdec::Error naming the first bad field.
inline void validate(const SamplingParams& params) {
  if (std::isnan(params.temperature) || std::isinf(params.temperature)) {
    throw Error("SamplingParams: temperature must be a finite number (<= 0 for greedy), got " +
                std::to_string(params.temperature));
  }
  if (params.top_k < 0) {
    throw Error("SamplingParams: top_k must be >= 0 (0 = off), got " +
                std::to_string(params.top_k));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    throw Error("SamplingParams: top_p must be in (0, 1] (1 = off), got " +
                std::to_string(params.top_p));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    throw Error("SamplingParams: min_p must be in [0, 1] (0 = off), got " +
                std::to_string(params.min_p));
  }
}

// ------------------------------------------------------------------ per-element math (host+device)

/// The tempered logit s = logit / T, computed in Real (T > 0).
template <class Real>
SPECDEC_HD inline Real tempered_logit(float logit, float temperature) {
  return static_cast<Real>(logit) / static_cast<Real>(temperature);
}

/// The unnormalised softmax weight exp(s - s_max) in (0, 1] (the max has weight exactly 1).
template <class Real>
SPECDEC_HD inline Real softmax_weight(Real s, Real s_max) {
  return std::exp(s - s_max);
}

/// Index of the largest of row[0 .. n-1]; the lowest index wins ties. n > 0.
template <class T>
SPECDEC_HD inline std::size_t argmax_row(const T* row, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

/// argmax over a span (lowest index wins ties). Throws on an empty span.
template <class T>
std::size_t argmax(std::span<const T> values) {
  if (values.empty()) throw Error("argmax: empty input");
  return argmax_row(values.data(), values.size());
}

// ------------------------------------------------------------------ host processing

/// probs = processed distribution of `logits` under `params` (see the top of this file).
/// logits and probs have the vocabulary size V > 0. Throws specdec::Error on NaN or infinite
/// logits, on a size mismatch and on bad params.
template <class Real>
void process_logits(std::span<const float> logits, const SamplingParams& params,
                    std::span<Real> probs) {
  validate(params);
  const std::size_t vocab = logits.size();
  if (vocab == 0) throw Error("process_logits: empty logits (vocabulary size 0)");
  if (probs.size() != vocab) {
    throw Error("process_logits: logits has " + std::to_string(vocab) + " entries but probs has " +
                std::to_string(probs.size()));
  }
  for (std::size_t i = 0; i < vocab; ++i) {
    if (!std::isfinite(logits[i])) {
      throw Error("process_logits: logits[" + std::to_string(i) + "] is " +
                  (std::isnan(logits[i]) ? "NaN" : (logits[i] > 0 ? "+inf" : "-inf")));
    }
  }

  if (params.greedy()) {
    std::fill(probs.begin(), probs.end(), Real(0));
    probs[argmax(logits)] = Real(1);
    return;
  }

  // 1. temperature: probs holds s_i for now.
  for (std::size_t i = 0; i < vocab; ++i)
    probs[i] = tempered_logit<Real>(logits[i], params.temperature);
  const Real s_max = probs[argmax_row(probs.data(), vocab)];

  // kept[i]: token i survives the filters so far.
  std::vector<unsigned char> kept(vocab, 1);

  // 2. top-k on the tempered logits: the k-th largest value is the threshold.
  const auto top_k = static_cast<std::size_t>(params.top_k);
  if (top_k > 0 && top_k < vocab) {
    std::vector<Real> sorted(probs.begin(), probs.end());
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(top_k - 1),
                     sorted.end(), [](Real a, Real b) { return a > b; });
    const Real kth = sorted[top_k - 1];
    for (std::size_t i = 0; i < vocab; ++i) kept[i] = probs[i] >= kth;
  }

  // Softmax weights of the kept tokens (the others become 0); w(argmax) = 1.
  double total = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    probs[i] = kept[i] ? softmax_weight(probs[i], s_max) : Real(0);
    total += static_cast<double>(probs[i]);
  }

  // 3. top-p. A token with probability < (1 - top_p) / V can never be in the nucleus: everything
  // ranked at or below it has mass < 1 - top_p, so the mass before it is > top_p. Only the other
  // tokens are sorted, which for peaked LM distributions is a small fraction of V.
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
    double before = 0;  // unnormalised mass of the tokens ranked before the current one
    for (const std::uint32_t i : order) {
      if (before < need) {
        before += static_cast<double>(probs[i]);
      } else {
        kept[i] = 0;
      }
    }
  }

  // 4. min-p relative to the largest probability (weight 1: the argmax is always kept).
  if (params.min_p > 0.0f) {
    const auto threshold = static_cast<Real>(params.min_p);
    for (std::size_t i = 0; i < vocab; ++i) {
      if (probs[i] < threshold) kept[i] = 0;
    }
  }

  // 5. renormalise over the kept tokens.
  total = 0;
  for (std::size_t i = 0; i < vocab; ++i) {
    if (!kept[i]) probs[i] = Real(0);
    total += static_cast<double>(probs[i]);
  }
  const double scale = 1.0 / total;  // total >= 1: the argmax has weight 1
  for (std::size_t i = 0; i < vocab; ++i) {
    probs[i] = static_cast<Real>(static_cast<double>(probs[i]) * scale);
  }
}

/// Convenience: the processed distribution as a new vector.
template <class Real = float>
std::vector<Real> process_logits(std::span<const float> logits, const SamplingParams& params) {
  std::vector<Real> probs(logits.size());
  process_logits<Real>(logits, params, std::span<Real>(probs));
  return probs;
}

}  // namespace specdec::sampling
