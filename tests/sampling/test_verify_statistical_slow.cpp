// Larger statistical cases of verify_chain (label "slow": not in the default CI run; run with
// ctest -L slow). Same harness and significance levels as test_verify_statistical.cpp.
#include <random>
#include <vector>

#include "verify_statistics.hpp"

using namespace specdec::test::statistical;

TEST_CASE("statistical: large vocabulary, several scan blocks", "[verify][statistical]") {
  run_case(random_case(7, 300, 1, true), 107);
}

TEST_CASE("statistical: LM-like rows over 2000 tokens, k = 3", "[verify][statistical][slow]") {
  std::mt19937_64 gen(8);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  specdec::sampling::SamplingParams sp;
  sp.top_p = 0.98f;
  Case c{2000, 3, {}, {}};
  for (std::size_t i = 0; i <= c.k; ++i) {
    std::vector<float> logits(c.vocab);
    for (float& l : logits) l = normal(gen);
    const auto p = specdec::sampling::process_logits<float>(logits, sp);
    c.p.insert(c.p.end(), p.begin(), p.end());
    if (i == c.k) break;
    for (float& l : logits) l += 0.5f * normal(gen);
    const auto q = specdec::sampling::process_logits<float>(logits, sp);
    c.q.insert(c.q.end(), q.begin(), q.end());
  }
  run_case(c, 108);
}
