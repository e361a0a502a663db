#pragma once
// The statistical harness of the sampling tests (see test_verify_statistical.cpp for the
// significance levels): N seeded trials of draft-then-verify with Philox, then chi-square and
// z-tests of the emitted law against the target's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

namespace specdec::test::statistical {

using specdec::token_t;
using specdec::sampling::PhiloxStream;
using specdec::sampling::sample_from;
using specdec::sampling::verify_chain;
using specdec::sampling::verify_chain_onehot;

constexpr double kAlpha = 1e-6;
constexpr double kMaxZ = 5.3;
constexpr std::uint64_t kTrials = 1'000'000;

/// p: (k+1) x V, q: k x V, as float rows.
struct Case {
  std::size_t vocab;
  std::size_t k;
  std::vector<float> p, q;
};

inline std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

/// The exact law of the float rows (what the sampler sees), in double.
inline std::vector<double> law_of(const std::vector<float>& m, std::size_t row, std::size_t vocab) {
  std::vector<double> r(vocab);
  double total = 0;
  for (std::size_t j = 0; j < vocab; ++j) total += r[j] = m[row * vocab + j];
  for (double& x : r) x /= total;
  return r;
}

inline double overlap(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t j = 0; j < a.size(); ++j) s += std::min(a[j], b[j]);
  return s;
}

/// Runs the trials; `onehot` drafts argmax q_i deterministically and uses verify_chain_onehot.
inline void run_case(const Case& c, std::uint64_t seed, bool onehot = false) {
  const std::size_t vocab = c.vocab;
  const std::size_t k = c.k;
  PhiloxStream draft_rng(seed, 1);
  PhiloxStream verify_rng(seed, 0);
  std::vector<std::uint64_t> first(vocab, 0);
  std::vector<std::uint64_t> accepted_count(k + 1, 0);
  std::vector<token_t> draft(k);
  for (std::uint64_t t = 0; t < kTrials; ++t) {
    for (std::size_t i = 0; i < k; ++i) {
      const std::span<const float> qi(c.q.data() + i * vocab, vocab);
      draft[i] = onehot ? static_cast<token_t>(specdec::sampling::argmax(qi))
                        : sample_from<float>(qi, draft_rng.next());
    }
    const auto r = onehot ? verify_chain_onehot<float>(c.p, draft, vocab, verify_rng)
                          : verify_chain<float>(c.p, c.q, draft, vocab, verify_rng);
    ++accepted_count[r.accepted];
    ++first[static_cast<std::size_t>(r.accepted > 0 ? draft[0] : r.next)];
  }

  // The first emitted token follows p_0.
  const auto p0 = law_of(c.p, 0, vocab);
  const auto chi = specdec::test::chi_square(first, p0);
  INFO("first token: chi2 = " << chi.statistic << " on " << chi.dof << " dof, p = " << chi.p_value);
  CHECK(chi.impossible_hits == 0);
  CHECK(chi.p_value > kAlpha);

  // Acceptance rates alpha_i = sum_x min(p_i, q_i) (for one-hot: p_i(x_i)), and the law of n.
  std::vector<double> alpha(k);
  for (std::size_t i = 0; i < k; ++i) {
    const auto pi = law_of(c.p, i, vocab);
    if (onehot) {
      alpha[i] =
          pi[specdec::sampling::argmax(std::span<const float>(c.q.data() + i * vocab, vocab))];
    } else {
      alpha[i] = overlap(pi, law_of(c.q, i, vocab));
    }
  }
  if (k == 0) return;
  const std::uint64_t accepted_first = kTrials - accepted_count[0];
  INFO("acceptance of x_0: " << accepted_first << " / " << kTrials << ", closed form " << alpha[0]);
  if (alpha[0] <= 0.0 || alpha[0] >= 1.0) {
    CHECK(static_cast<double>(accepted_first) == alpha[0] * static_cast<double>(kTrials));
  } else {
    CHECK(std::fabs(specdec::test::binomial_z(accepted_first, kTrials, alpha[0])) <= kMaxZ);
  }
  if (k > 1) {
    std::vector<double> law_n(k + 1);
    double reach = 1.0;  // P(n >= i)
    for (std::size_t i = 0; i <= k; ++i) {
      law_n[i] = i < k ? reach * (1.0 - alpha[i]) : reach;
      if (i < k) reach *= alpha[i];
    }
    const auto chi_n = specdec::test::chi_square(accepted_count, law_n);
    INFO("accepted count: chi2 = " << chi_n.statistic << " on " << chi_n.dof
                                   << " dof, p = " << chi_n.p_value);
    CHECK(chi_n.impossible_hits == 0);
    CHECK(chi_n.p_value > kAlpha);
  }
}

inline Case random_case(std::uint64_t seed, std::size_t vocab, std::size_t k, bool sparse) {
  std::mt19937_64 gen(seed);
  Case c{vocab, k, {}, {}};
  for (std::size_t i = 0; i <= k; ++i) {
    const auto r = to_float(specdec::test::random_distribution(gen, vocab, sparse));
    c.p.insert(c.p.end(), r.begin(), r.end());
  }
  for (std::size_t i = 0; i < k; ++i) {
    const auto r = to_float(specdec::test::random_distribution(gen, vocab, sparse));
    c.q.insert(c.q.end(), r.begin(), r.end());
  }
  return c;
}

}  // namespace specdec::test::statistical
