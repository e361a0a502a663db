#pragma once
// Helpers shared by the sampling tests: random distributions, the chi-square p-value, and the
// exact enumeration of verify_chain_row's outcomes over its uniforms.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "specdec/sampling/verify.hpp"

namespace specdec::test {

// ------------------------------------------------------------------ random distributions

/// A random distribution over `vocab` tokens. With `sparse`, about a third of the entries are
/// exactly 0 (at least one entry stays positive).
inline std::vector<double> random_distribution(std::mt19937_64& gen, std::size_t vocab,
                                               bool sparse = false) {
  std::exponential_distribution<double> exp1(1.0);
  std::bernoulli_distribution zero(sparse ? 1.0 / 3.0 : 0.0);
  std::vector<double> p(vocab);
  double total = 0;
  for (double& x : p) {
    x = zero(gen) ? 0.0 : exp1(gen);
    total += x;
  }
  if (total == 0) {
    p[std::uniform_int_distribution<std::size_t>(0, vocab - 1)(gen)] = 1.0;
    total = 1.0;
  }
  for (double& x : p) x /= total;
  return p;
}

// ------------------------------------------------------------------ chi-square

/// The regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a), a > 0,
/// x >= 0: the series for P = 1 - Q when x < a + 1, else the continued fraction for Q (modified
/// Lentz), both to double precision. Checked in test_stats_util against closed forms.
inline double gamma_q(double a, double x) {
  if (!(a > 0) || !(x >= 0)) throw std::domain_error("gamma_q: needs a > 0 and x >= 0");
  if (x == 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    // P(a, x) = e^-x x^a / Gamma(a + 1) * sum_n x^n / ((a+1) ... (a+n))
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-17) break;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Q(a, x) = e^-x x^a / Gamma(a) * 1 / (x + 1 - a - 1(1-a) / (x + 3 - a - 2(2-a) / (x + 5 - a ...
  constexpr double tiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / tiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefactor) * h;
}

/// Result of a chi-square goodness-of-fit test.
struct ChiSquare {
  double statistic = 0;
  std::size_t dof = 0;
  double p_value = 1;
  std::size_t impossible_hits = 0;  ///< observations in bins of expected probability 0
};

/// Pearson's chi-square of `counts` against the distribution `expected` (bins with expected
/// probability 0 are left out of the statistic and counted in impossible_hits instead).
inline ChiSquare chi_square(const std::vector<std::uint64_t>& counts,
                            const std::vector<double>& expected) {
  ChiSquare r;
  std::uint64_t n = 0;
  for (const auto c : counts) n += c;
  std::size_t bins = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0) {
      r.impossible_hits += counts[i];
      continue;
    }
    const double e = static_cast<double>(n) * expected[i];
    const double d = static_cast<double>(counts[i]) - e;
    r.statistic += d * d / e;
    ++bins;
  }
  r.dof = bins > 0 ? bins - 1 : 0;
  r.p_value = r.dof > 0 ? gamma_q(0.5 * static_cast<double>(r.dof), 0.5 * r.statistic) : 1.0;
  return r;
}

/// z-score of `successes` out of `n` Bernoulli(rate) trials.
inline double binomial_z(std::uint64_t successes, std::uint64_t n, double rate) {
  const double mean = static_cast<double>(n) * rate;
  const double sd = std::sqrt(static_cast<double>(n) * rate * (1.0 - rate));
  return (static_cast<double>(successes) - mean) / sd;
}

// ------------------------------------------------------------------ exact enumeration

/// The outcome of a verify call as a function of its uniforms u_0 ... u_k.
using VerifyOfUniforms = std::function<sampling::VerifyOutcome(const std::vector<double>&)>;

/// Largest t in [0, 1] such that pred(u) holds for u < t, for a predicate that is true on an
/// initial interval [0, t) and false on [t, 1). Bisection to the resolution of double.
inline double threshold(const std::function<bool(double)>& pred) {
  if (!pred(0.0)) return 0.0;
  double lo = 0.0;  // pred(lo) true
  double hi = 1.0;  // pred(hi) false, or hi == 1
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    (pred(mid) ? lo : hi) = mid;
  }
  return hi;
}

/// One branch of a verify call: accepted count, next token and its probability.
struct Branch {
  std::size_t accepted;
  token_t next;
  double probability;
};

/// All branches of one verify call over u_0 ... u_k ~ U[0, 1) independently, measured from the
/// implementation itself: the acceptance at position i is a threshold on u_i (found by
/// bisection), and the final token is a nondecreasing step function of u_k (its steps found by
/// bisection). Nothing about the algorithm's formulas is assumed, only this monotone shape.
inline std::vector<Branch> enumerate_branches(const VerifyOfUniforms& verify, std::size_t k,
                                              std::size_t vocab) {
  std::vector<Branch> branches;
  std::vector<double> us(k + 1, 0.5);

  // The final token as a function of u_k, with u_0 ... u_(k-1) fixed.
  const auto final_token = [&](double weight) {
    double previous = 0.0;
    for (std::size_t y = 0; y < vocab; ++y) {
      const double t = threshold([&](double u) {
        us[k] = u;
        return verify(us).next <= static_cast<token_t>(y);
      });
      if (t > previous) {
        us[k] = 0.5 * (previous + t);
        const auto outcome = verify(us);
        if (outcome.next != static_cast<token_t>(y)) {
          throw std::logic_error("enumerate_branches: the final token is not monotone in u_k");
        }
        branches.push_back({outcome.accepted, outcome.next, weight * (t - previous)});
        previous = t;
      }
    }
  };

  std::function<void(std::size_t, double)> position = [&](std::size_t i, double weight) {
    if (i == k) {
      final_token(weight);
      return;
    }
    for (std::size_t j = i + 1; j <= k; ++j) us[j] = 0.5;
    const double t = threshold([&](double u) {
      us[i] = u;
      return verify(us).accepted > i;
    });
    if (t > 0) {
      us[i] = 0.5 * t;
      position(i + 1, weight * t);
    }
    if (t < 1) {
      us[i] = 0.5 * (1.0 + t);
      for (std::size_t j = i + 1; j < k; ++j) us[j] = 0.5;
      const std::size_t before = branches.size();
      final_token(weight * (1.0 - t));
      for (std::size_t b = before; b < branches.size(); ++b) {
        if (branches[b].accepted != i) {
          throw std::logic_error("enumerate_branches: rejection region did not reject");
        }
      }
    }
  };
  position(0, 1.0);
  return branches;
}

/// The outcome, or an exception when the row function reported an error.
inline sampling::VerifyOutcome checked(const sampling::VerifyOutcome& outcome) {
  sampling::throw_if_error(outcome, "enumeration");
  return outcome;
}

/// verify_chain_row over double rows, as a function of explicit uniforms.
inline VerifyOfUniforms chain_of(const std::vector<double>& p, const std::vector<double>& q,
                                 const std::vector<token_t>& draft, std::size_t vocab) {
  return [&p, &q, &draft, vocab](const std::vector<double>& us) {
    return checked(sampling::verify_chain_row(p.data(), q.data(), draft.data(), draft.size(), vocab,
                                              [&us](std::size_t j) { return us[j]; }));
  };
}

/// verify_chain_onehot_row over double rows, as a function of explicit uniforms.
inline VerifyOfUniforms onehot_chain_of(const std::vector<double>& p,
                                        const std::vector<token_t>& draft, std::size_t vocab) {
  return [&p, &draft, vocab](const std::vector<double>& us) {
    return checked(sampling::verify_chain_onehot_row(p.data(), draft.data(), draft.size(), vocab,
                                                     [&us](std::size_t j) { return us[j]; }));
  };
}

}  // namespace specdec::test
