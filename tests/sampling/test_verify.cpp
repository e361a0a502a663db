// verify_chain and friends: the RNG counter convention, greedy == argmax decoding, one-hot ==
// materialised point masses, the batched layout, edge cases and every invalid input.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec/sampling/batch.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

using specdec::Error;
using specdec::token_t;
using specdec::sampling::philox_uniform;
using specdec::sampling::PhiloxStream;
using specdec::sampling::sample_from;
using specdec::sampling::verify_chain;
using specdec::sampling::verify_chain_greedy;
using specdec::sampling::verify_chain_onehot;
using specdec::test::random_distribution;

namespace {

/// k + 1 random target rows and k random draft rows, as floats, with tokens drawn from q.
struct Chain {
  std::size_t vocab;
  std::vector<float> p, q;
  std::vector<token_t> draft;
};

Chain random_chain(std::mt19937_64& gen, std::size_t k, std::size_t vocab, bool sparse = false) {
  Chain c{vocab, {}, {}, {}};
  for (std::size_t i = 0; i <= k; ++i) {
    for (const double x : random_distribution(gen, vocab, sparse)) c.p.push_back(float(x));
  }
  for (std::size_t i = 0; i < k; ++i) {
    const auto qi = random_distribution(gen, vocab, sparse);
    for (const double x : qi) c.q.push_back(float(x));
    c.draft.push_back(
        static_cast<token_t>(std::discrete_distribution<std::size_t>(qi.begin(), qi.end())(gen)));
  }
  return c;
}

std::vector<float> row(const std::vector<float>& m, std::size_t i, std::size_t vocab) {
  return {m.begin() + static_cast<std::ptrdiff_t>(i * vocab),
          m.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab)};
}

}  // namespace

TEST_CASE("verify_chain follows the documented RNG counter convention", "[verify]") {
  // Reimplements the documented rule with the public pieces: acceptance of x_i with the uniform
  // at counter c + i, the final sample with the uniform at counter c + k, then c += k + 1.
  std::mt19937_64 gen(8);
  for (int trial = 0; trial < 500; ++trial) {
    const std::size_t k = static_cast<std::size_t>(trial % 6);
    const std::size_t vocab = 1 + static_cast<std::size_t>(trial % 9);
    const Chain c = random_chain(gen, k, vocab, trial % 2 == 0);
    const std::uint64_t seed = gen();
    const std::uint64_t stream = trial % 4;
    const std::uint64_t start = gen() >> 8;

    std::size_t n = 0;
    while (n < k) {
      const float u = philox_uniform(seed, stream, start + n);
      const auto x = static_cast<std::size_t>(c.draft[n]);
      if (!(u * c.q[n * vocab + x] < c.p[n * vocab + x])) break;
      ++n;
    }
    const float u_final = philox_uniform(seed, stream, start + k);
    token_t expected_next;
    if (n == k) {
      expected_next = sample_from<float>(row(c.p, k, vocab), u_final);
    } else {
      std::vector<float> residual(vocab);
      double mass = 0;
      for (std::size_t j = 0; j < vocab; ++j) {
        residual[j] = std::max(0.0f, c.p[n * vocab + j] - c.q[n * vocab + j]);
        mass += residual[j];
      }
      expected_next = sample_from<float>(mass > 0 ? residual : row(c.p, n, vocab), u_final);
    }

    PhiloxStream rng(seed, stream, start);
    const auto r = verify_chain<float>(c.p, c.q, c.draft, vocab, rng);
    INFO("trial " << trial << ", k = " << k << ", V = " << vocab);
    CHECK(r.accepted == n);
    CHECK(r.next == expected_next);
    CHECK(rng.counter() == start + k + 1);
  }
}

TEST_CASE("greedy speculative decoding equals argmax decoding of the target", "[verify][greedy]") {
  // A Markov target and a different Markov draft; both decode greedily. The speculative
  // sequence must equal the target's own argmax chain token for token.
  std::mt19937_64 gen(17);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t vocab = 2 + static_cast<std::size_t>(trial % 7);
    const std::size_t k = 1 + static_cast<std::size_t>(trial % 5);
    std::vector<std::vector<double>> target(vocab), draft(vocab);
    for (std::size_t a = 0; a < vocab; ++a) {
      target[a] = random_distribution(gen, vocab);
      draft[a] = trial % 3 == 0 ? target[a] : random_distribution(gen, vocab);
    }
    const auto argmax = [](const std::vector<double>& r) {
      return static_cast<token_t>(specdec::sampling::argmax(std::span<const double>(r)));
    };
    std::vector<token_t> reference{0};
    while (reference.size() < 30)
      reference.push_back(argmax(target[static_cast<std::size_t>(reference.back())]));

    std::vector<token_t> emitted{0};
    while (emitted.size() < 30) {
      std::vector<token_t> proposal;
      token_t prev = emitted.back();
      for (std::size_t i = 0; i < k; ++i)
        proposal.push_back(prev = argmax(draft[static_cast<std::size_t>(prev)]));
      std::vector<double> p(target[static_cast<std::size_t>(emitted.back())]);
      for (const token_t x : proposal) {
        p.insert(p.end(), target[static_cast<std::size_t>(x)].begin(),
                 target[static_cast<std::size_t>(x)].end());
      }
      const auto r = verify_chain_greedy<double>(p, proposal, vocab);
      emitted.insert(emitted.end(), proposal.begin(),
                     proposal.begin() + static_cast<std::ptrdiff_t>(r.accepted));
      emitted.push_back(r.next);
    }
    emitted.resize(30);
    CHECK(emitted == reference);
  }
}

TEST_CASE("greedy verification ties go to the lowest index", "[verify][greedy]") {
  const std::vector<float> p{0.4f, 0.4f, 0.2f, /* row 1 */ 0.1f, 0.45f, 0.45f};
  CHECK(verify_chain_greedy<float>(p, std::vector<token_t>{1}, 3).accepted == 0);
  CHECK(verify_chain_greedy<float>(p, std::vector<token_t>{1}, 3).next == 0);
  const auto r = verify_chain_greedy<float>(p, std::vector<token_t>{0}, 3);
  CHECK(r.accepted == 1);
  CHECK(r.next == 1);
}

TEST_CASE("verify_chain at a tiny temperature decides like the greedy variant",
          "[verify][greedy]") {
  std::mt19937_64 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  specdec::sampling::SamplingParams cold;
  cold.temperature = specdec::sampling::kMinTemperature;  // the coldest sampled temperature
  for (int trial = 0; trial < 100; ++trial) {
    const std::size_t vocab = 50;
    const std::size_t k = 4;
    std::vector<float> p, q;
    std::vector<token_t> draft;
    for (std::size_t i = 0; i <= k; ++i) {
      std::vector<float> logits(vocab);
      for (float& l : logits) l = normal(gen);
      const auto pi = specdec::sampling::process_logits<float>(logits, cold);
      p.insert(p.end(), pi.begin(), pi.end());
      if (i == k) break;
      for (float& l : logits) l += 0.5f * normal(gen);  // a draft that mostly agrees
      const auto qi = specdec::sampling::process_logits<float>(logits, cold);
      q.insert(q.end(), qi.begin(), qi.end());
      draft.push_back(static_cast<token_t>(specdec::sampling::argmax(std::span<const float>(qi))));
    }
    PhiloxStream rng(trial, 0);
    const auto sampled = verify_chain<float>(p, q, draft, vocab, rng);
    const auto greedy = verify_chain_greedy<float>(p, draft, vocab);
    CHECK(sampled.accepted == greedy.accepted);
    CHECK(sampled.next == greedy.next);
  }
}

TEST_CASE("one-hot verification equals verify_chain with materialised point masses",
          "[verify][onehot]") {
  std::mt19937_64 gen(23);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t k = static_cast<std::size_t>(trial % 5);
    const std::size_t vocab = 1 + static_cast<std::size_t>(trial % 40);
    Chain c = random_chain(gen, k, vocab, trial % 2 == 1);
    c.q.assign(k * vocab, 0.0f);
    for (std::size_t i = 0; i < k; ++i)
      c.q[i * vocab + static_cast<std::size_t>(c.draft[i])] = 1.0f;
    PhiloxStream a(trial, 1, 1000);
    PhiloxStream b(trial, 1, 1000);
    const auto onehot = verify_chain_onehot<float>(c.p, c.draft, vocab, a);
    const auto dense = verify_chain<float>(c.p, c.q, c.draft, vocab, b);
    CHECK(onehot.accepted == dense.accepted);
    CHECK(onehot.next == dense.next);
    CHECK(a.counter() == b.counter());
  }
}

TEST_CASE("batched verification equals per-sequence verify_chain on streams 0 .. B-1",
          "[verify][batch]") {
  std::mt19937_64 gen(99);
  const std::size_t batch = 5;
  const std::size_t k = 3;
  const std::size_t vocab = 11;
  std::vector<float> p, q;
  std::vector<token_t> draft;
  std::vector<Chain> chains;
  for (std::size_t b = 0; b < batch; ++b) {
    chains.push_back(random_chain(gen, k, vocab, b % 2 == 0));
    p.insert(p.end(), chains.back().p.begin(), chains.back().p.end());
    q.insert(q.end(), chains.back().q.begin(), chains.back().q.end());
    draft.insert(draft.end(), chains.back().draft.begin(), chains.back().draft.end());
  }
  for (std::uint64_t counter = 0; counter < 40; counter += k + 1) {
    std::vector<std::int32_t> accepted(batch, -7);
    std::vector<token_t> emitted(batch * (k + 1), -7);
    specdec::sampling::verify_chain_batch<float>(p, q, draft, batch, k, vocab, 1234, counter,
                                                 accepted, emitted);
    std::vector<std::int32_t> onehot_accepted(batch);
    std::vector<token_t> onehot_emitted(batch * (k + 1));
    specdec::sampling::verify_chain_onehot_batch<float>(p, draft, batch, k, vocab, 1234, counter,
                                                        onehot_accepted, onehot_emitted);
    std::vector<std::int32_t> greedy_accepted(batch);
    std::vector<token_t> greedy_emitted(batch * (k + 1));
    specdec::sampling::verify_chain_greedy_batch<float>(p, draft, batch, k, vocab, greedy_accepted,
                                                        greedy_emitted);
    for (std::size_t b = 0; b < batch; ++b) {
      const Chain& c = chains[b];
      PhiloxStream rng(1234, b, counter);
      PhiloxStream rng1(1234, b, counter);
      const auto one = verify_chain<float>(c.p, c.q, c.draft, vocab, rng);
      const auto oh = verify_chain_onehot<float>(c.p, c.draft, vocab, rng1);
      const auto gr = verify_chain_greedy<float>(c.p, c.draft, vocab);
      const auto check_row = [&](const specdec::sampling::VerifyResult& want, std::int32_t n,
                                 const std::vector<token_t>& out) {
        CHECK(n == static_cast<std::int32_t>(want.accepted));
        for (std::size_t i = 0; i <= k; ++i) {
          const token_t expect =
              i < want.accepted ? c.draft[i] : (i == want.accepted ? want.next : -1);
          CHECK(out[b * (k + 1) + i] == expect);
        }
      };
      check_row(one, accepted[b], emitted);
      check_row(oh, onehot_accepted[b], onehot_emitted);
      check_row(gr, greedy_accepted[b], greedy_emitted);
    }
  }
}

TEST_CASE("edge cases: k = 0, V = 1, q(x) = 0, p(x) = 0", "[verify][edge]") {
  SECTION("k = 0 samples p_0 with the uniform at counter c and advances by 1") {
    std::mt19937_64 gen(1);
    for (int trial = 0; trial < 200; ++trial) {
      const std::size_t vocab = 1 + static_cast<std::size_t>(trial % 13);
      std::vector<float> p;
      for (const double x : random_distribution(gen, vocab, true)) p.push_back(float(x));
      PhiloxStream rng(trial, 2, 50);
      const auto r = verify_chain<float>(p, {}, {}, vocab, rng);
      CHECK(r.accepted == 0);
      CHECK(r.next == sample_from<float>(p, philox_uniform(trial, 2, 50)));
      CHECK(rng.counter() == 51);
    }
  }
  SECTION("V = 1: everything is token 0 and always accepted") {
    const std::vector<float> p{1.0f, 1.0f, 1.0f};
    const std::vector<float> q{1.0f, 1.0f};
    const std::vector<token_t> draft{0, 0};
    for (std::uint64_t seed = 0; seed < 100; ++seed) {
      PhiloxStream rng(seed, 0);
      const auto r = verify_chain<float>(p, q, draft, 1, rng);
      CHECK(r.accepted == 2);
      CHECK(r.next == 0);
    }
  }
  SECTION("q(x) = 0 < p(x): the token is always accepted (no division by zero)") {
    const std::vector<float> p{0.5f, 0.5f, /* bonus */ 0.0f, 1.0f};
    const std::vector<float> q{1.0f, 0.0f};
    for (std::uint64_t seed = 0; seed < 1000; ++seed) {
      PhiloxStream rng(seed, 0);
      const auto r = verify_chain<float>(p, q, std::vector<token_t>{1}, 2, rng);
      CHECK(r.accepted == 1);
      CHECK(r.next == 1);
    }
  }
  SECTION("q(x) = 0 = p(x): always rejected, the residual is sampled") {
    const std::vector<float> p{0.25f, 0.75f, 0.0f, /* bonus */ 1.0f, 0.0f, 0.0f};
    const std::vector<float> q{0.25f, 0.25f, 0.5f};
    PhiloxStream rng(5, 0);
    // Token 2 has p = 0; give it q = 0 too by using a different q row.
    const std::vector<float> q0{0.5f, 0.5f, 0.0f};
    for (int t = 0; t < 1000; ++t) {
      const auto r = verify_chain<float>(p, q0, std::vector<token_t>{2}, 3, rng);
      CHECK(r.accepted == 0);
      CHECK(r.next == 1);  // max(0, p - q0) = (0, 0.25, 0)
    }
    // p(x) = 0 < q(x): rejected as well.
    for (int t = 0; t < 1000; ++t) {
      const auto r = verify_chain<float>(p, q, std::vector<token_t>{2}, 3, rng);
      CHECK(r.accepted == 0);
      CHECK(r.next == 1);  // max(0, p - q) = (0, 0.5, 0)
    }
  }
  SECTION("p == q: the residual has no mass but acceptance is certain") {
    const std::vector<float> p{0.3f, 0.7f, 0.3f, 0.7f};
    const std::vector<float> q{0.3f, 0.7f};
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
      PhiloxStream rng(seed, 0);
      CHECK(verify_chain<float>(p, q, std::vector<token_t>{static_cast<token_t>(seed % 2)}, 2, rng)
                .accepted == 1);
    }
  }
  SECTION("a zero-mass residual (reachable only through rounding) samples from p") {
    // p(x) < q(x) at the drafted token, but p <= q everywhere else as well (rows that do not sum
    // to exactly the same value): the residual max(0, p - q) is all zero.
    const std::vector<double> p{0.4999, 0.5, /* bonus */ 0.5, 0.5};
    const std::vector<double> q{0.5, 0.5};
    const std::vector<token_t> draft{0};
    std::vector<double> law(2, 0.0);
    for (const auto& b :
         specdec::test::enumerate_branches(specdec::test::chain_of(p, q, draft, 2), 1, 2)) {
      if (b.accepted == 0) law[static_cast<std::size_t>(b.next)] += b.probability;
    }
    // Rejection probability 1 - 0.4999/0.5 = 2e-4, split like p_0 = (0.4999, 0.5) / 0.9999.
    CHECK(law[0] == Approx(2e-4 * 0.4999 / 0.9999).margin(1e-12));
    CHECK(law[1] == Approx(2e-4 * 0.5 / 0.9999).margin(1e-12));
  }
}

TEST_CASE("sample_from never returns a zero-probability token", "[verify][edge]") {
  const std::vector<float> p{0.0f, 0.3f, 0.0f, 0.0f, 0.7f, 0.0f};
  for (const float u : {0.0f, 1e-8f, 0.29999f, 0.3f, 0.5f, 0.99999994f}) {
    const token_t t = sample_from<float>(p, u);
    CHECK((t == 1 || t == 4));
  }
  CHECK(sample_from<float>(p, 0.0f) == 1);
  CHECK(sample_from<float>(p, 0.99999994f) == 4);
  // Weights that do not sum to 1 are normalised by their total.
  const std::vector<double> w{0.0, 2.0, 0.0, 6.0};
  CHECK(sample_from<double>(w, 0.2499f) == 1);
  CHECK(sample_from<double>(w, 0.2501f) == 3);
  // Large rows (several scan blocks) with the mass in the last entries.
  std::vector<float> big(1000, 0.0f);
  big[998] = 0.5f;
  big[999] = 0.5f;
  CHECK(sample_from<float>(big, 0.0f) == 998);
  CHECK(sample_from<float>(big, 0.99999994f) == 999);
}

TEST_CASE("verify_chain rejects every invalid input with a message naming it", "[verify][errors]") {
  const std::size_t vocab = 3;
  const std::vector<float> p{0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f, 0.3f, 0.3f, 0.4f};  // k = 2
  const std::vector<float> q{0.3f, 0.3f, 0.4f, 0.5f, 0.25f, 0.25f};
  const std::vector<token_t> draft{1, 2};
  const auto throws = [&](const std::vector<float>& pp, const std::vector<float>& qq,
                          const std::vector<token_t>& d, std::size_t v, const std::string& text) {
    PhiloxStream rng(1, 0);
    CHECK_THROWS_WITH(verify_chain<float>(pp, qq, d, v, rng), Catch::Matchers::Contains(text));
    CHECK(rng.counter() == 0);  // a failed call does not consume uniforms
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  throws(p, q, {1, 3}, vocab, "draft[1] = 3 is not a token id");
  throws(p, q, {-1, 0}, vocab, "draft[0] = -1");
  throws(p, q, draft, 0, "vocabulary size V is 0");
  throws({p.begin(), p.begin() + 6}, q, draft, vocab, "k larger than the buffer");
  throws(p, {q.begin(), q.begin() + 3}, draft, vocab, "q (draft distributions) has 3 entries");
  throws(p, q, {1, 2, 0}, vocab, "expected 4 rows");
  throws({p.begin(), p.end() - 1}, q, draft, vocab, "p (target distributions) has 8 entries");

  auto bad = p;
  bad[1] = nan;  // p_0(x_0)
  throws(bad, q, draft, vocab, "p row 0 at the drafted token is nan");
  auto badq = q;
  badq[1] = -0.1f;
  throws(p, badq, draft, vocab, "q row 0 at the drafted token");
  badq = q;
  badq[1] = inf;
  throws(p, badq, draft, vocab, "q row 0 at the drafted token is inf");

  // Rows read in full: force a rejection at position 0 (p_0(x_0) = 0) and corrupt that row.
  auto reject = p;
  reject[0] = 0.5f;
  reject[1] = 0.0f;
  auto r2 = reject;
  r2[2] = nan;
  throws(r2, q, draft, vocab, "p row 0 has a NaN, infinite or negative entry");
  r2 = reject;
  r2[2] = 0.9f;  // sums to 1.4
  throws(r2, q, draft, vocab, "p row 0 sums to 1.4");
  auto q2 = q;
  q2[0] = -0.3f;
  q2[2] = 1.0f;
  throws(reject, q2, draft, vocab, "q row 0 has a NaN, infinite or negative entry");
  q2 = q;
  q2[0] = 0.0f;
  throws(reject, q2, draft, vocab, "q row 0 sums to 0.7");

  // The bonus row is read in full when everything is accepted (p_i(x_i) >= q_i(x_i) here).
  auto accept = p;
  accept[1] = 0.6f;
  accept[0] = 0.0f;
  accept[2] = 0.4f;
  accept[5] = 0.8f;
  auto bonus = accept;
  bonus[6] = inf;
  throws(bonus, q, draft, vocab, "p row 2 has a NaN, infinite or negative entry");
  bonus = accept;
  bonus[6] = 3.0f;
  throws(bonus, q, draft, vocab, "p row 2 sums to");
  {
    PhiloxStream rng(1, 0);
    CHECK(verify_chain<float>(accept, q, draft, vocab, rng).accepted == 2);
  }

  // The greedy and one-hot variants check the same things.
  CHECK_THROWS_WITH(verify_chain_greedy<float>(p, std::vector<token_t>{5, 0}, vocab),
                    Catch::Matchers::Contains("draft[0] = 5"));
  auto g = p;
  g[4] = nan;
  CHECK_THROWS_WITH(verify_chain_greedy<float>(g, std::vector<token_t>{2, 0}, vocab),
                    Catch::Matchers::Contains("p row 1 has a NaN"));
  CHECK_THROWS_WITH(verify_chain_greedy<float>(p, std::vector<token_t>{2, 0, 1}, vocab),
                    Catch::Matchers::Contains("k larger than the buffer"));
  PhiloxStream rng(0, 0);
  CHECK_THROWS_WITH(verify_chain_onehot<float>(p, std::vector<token_t>{0, 9}, vocab, rng),
                    Catch::Matchers::Contains("draft[1] = 9"));
  CHECK_THROWS_WITH(verify_chain_onehot<float>(bad, draft, vocab, rng),
                    Catch::Matchers::Contains("p row 0 at the drafted token is nan"));

  // sample_from
  CHECK_THROWS_WITH(sample_from<float>(std::vector<float>{0.5f, 0.5f}, 1.0f),
                    Catch::Matchers::Contains("not in [0, 1)"));
  CHECK_THROWS_WITH(sample_from<float>(std::vector<float>{0.5f, 0.5f}, nan),
                    Catch::Matchers::Contains("not in [0, 1)"));
  CHECK_THROWS_WITH(sample_from<float>(std::vector<float>{0.0f, 0.0f}, 0.5f),
                    Catch::Matchers::Contains("no mass"));
  CHECK_THROWS_WITH(sample_from<float>(std::vector<float>{0.5f, -0.5f, 1.0f}, 0.5f),
                    Catch::Matchers::Contains("negative"));
  CHECK_THROWS_WITH(sample_from<float>(std::vector<float>{}, 0.5f),
                    Catch::Matchers::Contains("vocabulary size V is 0"));
}

TEST_CASE("batched verification rejects invalid shapes and names the sequence",
          "[verify][errors]") {
  const std::size_t batch = 2, k = 1, vocab = 2;
  std::vector<float> p{0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<float> q{0.5f, 0.5f, 0.5f, 0.5f};
  std::vector<token_t> draft{0, 1};
  std::vector<std::int32_t> accepted(batch);
  std::vector<token_t> emitted(batch * (k + 1));
  using specdec::sampling::verify_chain_batch;
  const auto run = [&](std::size_t b, std::size_t kk, const std::string& text) {
    CHECK_THROWS_WITH(verify_chain_batch<float>(p, q, draft, b, kk, vocab, 1, 0, accepted, emitted),
                      Catch::Matchers::Contains(text));
  };
  run(3, k, "p (B x (k+1) x V target distributions)");
  run(batch, 2, "k larger than the buffer");
  std::vector<std::int32_t> short_accepted(1);
  CHECK_THROWS_WITH(
      verify_chain_batch<float>(p, q, draft, batch, k, vocab, 1, 0, short_accepted, emitted),
      Catch::Matchers::Contains("accepted has 1 entries, expected B = 2"));
  std::vector<token_t> short_emitted(3);
  CHECK_THROWS_WITH(
      verify_chain_batch<float>(p, q, draft, batch, k, vocab, 1, 0, accepted, short_emitted),
      Catch::Matchers::Contains("emitted has 3 entries"));
  draft[1] = 2;
  run(batch, k, "(sequence 1): draft[0] = 2");
  draft[1] = 1;
  q.pop_back();
  run(batch, k, "q (B x k x V draft distributions) has 3 entries");
}
