// Statistical tests of verify_chain in float, with the production RNG (Philox).
//
// Each case runs N >= 10^6 seeded trials of: draw x_i ~ q_i with one Philox stream, verify with
// another. Checks, each at a stated significance:
//  - chi-square goodness of fit of the first emitted token against p_0 (bins with p_0 = 0 must
//    stay empty), at alpha = 1e-6;
//  - the acceptance rate of the first drafted token against the closed form
//    alpha_0 = sum_x min(p_0(x), q_0(x)): |z| <= 5.3 (two-sided p ~ 1.2e-7);
//  - for chains (k > 1, target rows independent of the drafted prefix), the law of the accepted
//    count n: P(n >= j) = prod_{i<j} alpha_i, by chi-square at alpha = 1e-6.
// With ~25 such checks in this file, the chance of any false alarm is below 1e-4 per run; the
// seeds are fixed, so a run is reproducible anyway.
#include <random>
#include <vector>

#include "verify_statistics.hpp"

using namespace specdec::test::statistical;

TEST_CASE("statistical: random p and q, k = 1", "[verify][statistical]") {
  run_case(random_case(1, 10, 1, false), 101);
}

TEST_CASE("statistical: sparse p and q, k = 4 (law of the accepted count)",
          "[verify][statistical]") {
  run_case(random_case(2, 12, 4, true), 102);
}

TEST_CASE("statistical: disjoint supports (everything rejected)", "[verify][statistical]") {
  Case c{8, 2, {}, {}};
  const std::vector<float> left{0.1f, 0.2f, 0.3f, 0.4f, 0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> right{0.0f, 0.0f, 0.0f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
  for (int i = 0; i < 3; ++i) c.p.insert(c.p.end(), left.begin(), left.end());
  for (int i = 0; i < 2; ++i) c.q.insert(c.q.end(), right.begin(), right.end());
  run_case(c, 103);
}

TEST_CASE("statistical: near-identical p and q (acceptance ~ 0.999)", "[verify][statistical]") {
  std::mt19937_64 gen(4);
  std::uniform_real_distribution<double> wiggle(-1e-3, 1e-3);
  Case c{16, 3, {}, {}};
  for (std::size_t i = 0; i <= c.k; ++i) {
    const auto p = specdec::test::random_distribution(gen, c.vocab);
    c.p.insert(c.p.end(), p.begin(), p.end());
    if (i == c.k) break;
    std::vector<double> q(p);
    double total = 0;
    for (double& x : q) total += x *= 1.0 + wiggle(gen);
    for (double& x : q) c.q.push_back(static_cast<float>(x / total));
  }
  run_case(c, 104);
}

TEST_CASE("statistical: LM-like distributions after top-k / top-p / min-p",
          "[verify][statistical]") {
  // Zero entries from the filters, a draft that shares most of the target's mass.
  std::mt19937_64 gen(5);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  specdec::sampling::SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 20;
  sp.top_p = 0.95f;
  sp.min_p = 0.01f;
  Case c{64, 2, {}, {}};
  for (std::size_t i = 0; i <= c.k; ++i) {
    std::vector<float> logits(c.vocab);
    for (float& l : logits) l = normal(gen);
    const auto p = specdec::sampling::process_logits<float>(logits, sp);
    c.p.insert(c.p.end(), p.begin(), p.end());
    if (i == c.k) break;
    for (float& l : logits) l += 0.7f * normal(gen);
    const auto q = specdec::sampling::process_logits<float>(logits, sp);
    c.q.insert(c.q.end(), q.begin(), q.end());
  }
  run_case(c, 105);
}

TEST_CASE("statistical: one-hot proposals", "[verify][statistical]") {
  // Deterministic proposals (argmax of q_i) with the one-hot verifier: the first token still
  // follows p_0, and x_i is accepted with probability p_i(x_i).
  run_case(random_case(6, 10, 3, false), 106, /*onehot=*/true);
}
