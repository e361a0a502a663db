// Exactness of verify_chain by exhaustive enumeration, in double.
//
// Every branch of a verify call is measured from the implementation itself
// (specdec::test::enumerate_branches: bisection over each uniform), every drafted sequence is
// weighted by its draft probability, and the emitted law is compared with the target's law to
// 1e-12. Nothing here uses the formulas of the algorithm, only the target and draft tables.
#include <cstddef>
#include <map>
#include <random>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

using specdec::token_t;
using specdec::test::Branch;
using specdec::test::chain_of;
using specdec::test::enumerate_branches;
using specdec::test::onehot_chain_of;
using specdec::test::random_distribution;

namespace {

constexpr double kTolerance = 1e-12;

/// Law of the first emitted token of one verify call with k = 1, summed over the drafted
/// token x ~ q0. p = [p0; p1] (2 x V), q = q0.
std::vector<double> first_token_law(const std::vector<double>& p, const std::vector<double>& q,
                                    std::size_t vocab) {
  std::vector<double> law(vocab, 0.0);
  for (std::size_t x = 0; x < vocab; ++x) {
    if (q[x] == 0) continue;  // never drafted
    const std::vector<token_t> draft{static_cast<token_t>(x)};
    for (const Branch& b : enumerate_branches(chain_of(p, q, draft, vocab), 1, vocab)) {
      const std::size_t first = b.accepted >= 1 ? x : static_cast<std::size_t>(b.next);
      law[first] += q[x] * b.probability;
    }
  }
  return law;
}

void require_law(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("token " << i << ": emitted " << got[i] << ", target " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= kTolerance);
  }
}

// ---------------------------------------------------------------- Markov chains

/// A first-order Markov model: row a is the distribution of the token after a.
struct Markov {
  std::size_t vocab;
  std::vector<double> table;  // vocab x vocab
  [[nodiscard]] const double* row(token_t a) const {
    return table.data() + static_cast<std::size_t>(a) * vocab;
  }
};

Markov random_markov(std::mt19937_64& gen, std::size_t vocab, bool sparse) {
  Markov m{vocab, {}};
  for (std::size_t a = 0; a < vocab; ++a) {
    const auto r = random_distribution(gen, vocab, sparse);
    m.table.insert(m.table.end(), r.begin(), r.end());
  }
  return m;
}

using Sequence = std::vector<token_t>;
using Joint = std::map<Sequence, double>;

/// One drafted chain and its probability under the drafter.
struct Proposal {
  std::vector<token_t> tokens;
  std::vector<double> q;  // k x V, empty for a one-hot drafter
  double weight;
};

/// Every chain of k tokens the drafter can propose after context c. A sampling drafter draws
/// x_i ~ draft(. | x_(i-1)); a one-hot drafter proposes x_i = successor[x_(i-1)].
std::vector<Proposal> proposals(const Markov& draft, const std::vector<token_t>* successor,
                                token_t c, std::size_t k) {
  std::vector<Proposal> out;
  Proposal current{{}, {}, 1.0};
  const std::function<void(token_t)> extend = [&](token_t prev) {
    if (current.tokens.size() == k) {
      out.push_back(current);
      return;
    }
    if (successor != nullptr) {
      const token_t x = (*successor)[static_cast<std::size_t>(prev)];
      current.tokens.push_back(x);
      extend(x);
      current.tokens.pop_back();
      return;
    }
    const double* row = draft.row(prev);
    for (std::size_t x = 0; x < draft.vocab; ++x) {
      if (row[x] == 0) continue;
      const Proposal saved = current;
      current.tokens.push_back(static_cast<token_t>(x));
      current.q.insert(current.q.end(), row, row + draft.vocab);
      current.weight *= row[x];
      extend(static_cast<token_t>(x));
      current = saved;
    }
  };
  extend(c);
  return out;
}

/// Law of the first m tokens emitted by speculative decoding (rounds of k drafted tokens)
/// after context c, with `target` as the target model.
class SpeculativeLaw {
 public:
  SpeculativeLaw(const Markov& target, const Markov& draft, const std::vector<token_t>* successor,
                 std::size_t k)
      : target_(target), draft_(draft), successor_(successor), k_(k) {}

  const Joint& first_tokens(token_t c, std::size_t m) {
    const auto key = std::make_pair(c, m);
    if (const auto it = memo_.find(key); it != memo_.end()) return it->second;
    Joint law;
    const std::size_t vocab = target_.vocab;
    for (const Proposal& prop : proposals(draft_, successor_, c, k_)) {
      // Target rows p_0 ... p_k: after c, then after each drafted token.
      std::vector<double> p(target_.row(c), target_.row(c) + vocab);
      for (const token_t x : prop.tokens) p.insert(p.end(), target_.row(x), target_.row(x) + vocab);
      const auto branches =
          enumerate_branches(successor_ != nullptr ? onehot_chain_of(p, prop.tokens, vocab)
                                                   : chain_of(p, prop.q, prop.tokens, vocab),
                             k_, vocab);
      for (const Branch& b : branches) {
        Sequence emitted(prop.tokens.begin(),
                         prop.tokens.begin() + static_cast<std::ptrdiff_t>(b.accepted));
        emitted.push_back(b.next);
        const double w = prop.weight * b.probability;
        if (emitted.size() >= m) {
          law[Sequence(emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(m))] += w;
        } else {
          // The round ended early: the next round starts after the last emitted token.
          for (const auto& [rest, pr] : first_tokens(emitted.back(), m - emitted.size())) {
            Sequence full = emitted;
            full.insert(full.end(), rest.begin(), rest.end());
            law[full] += w * pr;
          }
        }
      }
    }
    return memo_[key] = std::move(law);
  }

 private:
  const Markov& target_;
  const Markov& draft_;
  const std::vector<token_t>* successor_;
  std::size_t k_;
  std::map<std::pair<token_t, std::size_t>, Joint> memo_;
};

/// Compares a 2-token law with the target's: P(a | c) P(b | a).
void require_target_joint(const Joint& got, const Markov& target, token_t c) {
  double total = 0;
  for (std::size_t a = 0; a < target.vocab; ++a) {
    for (std::size_t b = 0; b < target.vocab; ++b) {
      const Sequence s{static_cast<token_t>(a), static_cast<token_t>(b)};
      const double want = target.row(c)[a] * target.row(static_cast<token_t>(a))[b];
      const auto it = got.find(s);
      const double have = it == got.end() ? 0.0 : it->second;
      INFO("tokens (" << a << ", " << b << "): emitted " << have << ", target " << want);
      REQUIRE(std::fabs(have - want) <= kTolerance);
      total += have;
    }
  }
  REQUIRE(std::fabs(total - 1.0) <= kTolerance);
  REQUIRE(got.size() <= target.vocab * target.vocab);
}

}  // namespace

// The worked example: target P_T = [0.6, 0.3, 0.1] over (A, B, C), draft P_D = [0.4, 0.4, 0.2].
TEST_CASE("worked example: acceptance 0.75 for B, residual all A, acceptance 0.5 for C",
          "[verify][exhaustive]") {
  const std::size_t vocab = 3;
  const std::vector<double> p{0.6, 0.3, 0.1, /* bonus row */ 0.2, 0.3, 0.5};
  const std::vector<double> q{0.4, 0.4, 0.2};
  const auto branches_for = [&](token_t x) {
    const std::vector<token_t> draft{x};
    return enumerate_branches(chain_of(p, q, draft, vocab), 1, vocab);
  };
  const auto acceptance = [](const std::vector<Branch>& branches) {
    double a = 0;
    for (const Branch& b : branches) a += b.accepted == 1 ? b.probability : 0.0;
    return a;
  };
  const auto rejected_next = [](const std::vector<Branch>& branches, token_t y) {
    double r = 0;
    for (const Branch& b : branches) r += b.accepted == 0 && b.next == y ? b.probability : 0.0;
    return r;
  };

  const auto a_branches = branches_for(0);
  CHECK(acceptance(a_branches) == Approx(1.0).margin(kTolerance));  // p(A) > q(A): always kept

  const auto b_branches = branches_for(1);
  CHECK(acceptance(b_branches) == Approx(0.75).margin(kTolerance));
  CHECK(rejected_next(b_branches, 0) == Approx(0.25).margin(kTolerance));  // the residual is all A

  const auto c_branches = branches_for(2);
  CHECK(acceptance(c_branches) == Approx(0.5).margin(kTolerance));
  CHECK(rejected_next(c_branches, 0) == Approx(0.5).margin(kTolerance));

  // After an accepted draft the bonus token follows p_1.
  for (token_t y = 0; y < 3; ++y) {
    double bonus = 0;
    for (const Branch& b : b_branches) bonus += b.accepted == 1 && b.next == y ? b.probability : 0;
    CHECK(bonus == Approx(0.75 * p[3 + static_cast<std::size_t>(y)]).margin(kTolerance));
  }

  require_law(first_token_law(p, q, vocab), {0.6, 0.3, 0.1});
}

TEST_CASE("one verify step emits exactly p, for random (p, q) with V <= 6",
          "[verify][exhaustive]") {
  std::mt19937_64 gen(2024);
  for (std::size_t vocab = 1; vocab <= 6; ++vocab) {
    for (int trial = 0; trial < 60; ++trial) {
      const bool sparse = trial % 3 != 0;
      auto p0 = random_distribution(gen, vocab, sparse);
      auto q0 = random_distribution(gen, vocab, sparse);
      if (trial % 10 == 4) q0 = p0;         // identical: everything is accepted
      if (trial % 10 == 7 && vocab >= 2) {  // disjoint supports: everything is rejected
        p0.assign(vocab, 0.0);
        q0.assign(vocab, 0.0);
        p0[0] = 1.0;
        q0[vocab - 1] = 1.0;
      }
      const auto p1 = random_distribution(gen, vocab, sparse);
      std::vector<double> p = p0;
      p.insert(p.end(), p1.begin(), p1.end());
      INFO("V = " << vocab << ", trial " << trial);
      require_law(first_token_law(p, q0, vocab), p0);
    }
  }
}

TEST_CASE("k = 0 samples exactly from p_0", "[verify][exhaustive]") {
  std::mt19937_64 gen(5);
  for (std::size_t vocab = 1; vocab <= 6; ++vocab) {
    const auto p = random_distribution(gen, vocab, true);
    const std::vector<double> q;
    const std::vector<token_t> draft;
    std::vector<double> law(vocab, 0.0);
    for (const Branch& b : enumerate_branches(chain_of(p, q, draft, vocab), 0, vocab)) {
      REQUIRE(b.accepted == 0);
      law[static_cast<std::size_t>(b.next)] += b.probability;
    }
    require_law(law, p);
  }
}

TEST_CASE("one-hot proposals: one verify step emits exactly p", "[verify][exhaustive]") {
  std::mt19937_64 gen(77);
  for (std::size_t vocab = 1; vocab <= 6; ++vocab) {
    for (int trial = 0; trial < 20; ++trial) {
      auto p0 = random_distribution(gen, vocab, trial % 2 == 0);
      const auto p1 = random_distribution(gen, vocab, false);
      std::vector<double> p = p0;
      p.insert(p.end(), p1.begin(), p1.end());
      for (std::size_t x = 0; x < vocab; ++x) {  // any proposal, even one p gives 0
        const std::vector<token_t> draft{static_cast<token_t>(x)};
        std::vector<double> law(vocab, 0.0);
        for (const Branch& b : enumerate_branches(onehot_chain_of(p, draft, vocab), 1, vocab)) {
          law[b.accepted == 1 ? x : static_cast<std::size_t>(b.next)] += b.probability;
        }
        INFO("V = " << vocab << ", trial " << trial << ", proposal " << x);
        require_law(law, p0);
      }
    }
  }
}

TEST_CASE("2-token Markov chain: the joint of two emitted tokens is the target's joint",
          "[verify][exhaustive]") {
  std::mt19937_64 gen(31337);
  for (std::size_t vocab = 2; vocab <= 4; ++vocab) {
    for (std::size_t k = 1; k <= 3; ++k) {
      for (int trial = 0; trial < 2; ++trial) {
        const Markov target = random_markov(gen, vocab, trial == 1);
        const Markov draft = random_markov(gen, vocab, trial == 1);
        const token_t context = static_cast<token_t>(trial % vocab);
        INFO("V = " << vocab << ", k = " << k << ", trial " << trial);
        SpeculativeLaw law(target, draft, nullptr, k);
        require_target_joint(law.first_tokens(context, 2), target, context);
      }
    }
  }
}

TEST_CASE("2-token Markov chain with a one-hot drafter", "[verify][exhaustive]") {
  std::mt19937_64 gen(4242);
  for (std::size_t vocab = 2; vocab <= 4; ++vocab) {
    for (std::size_t k = 1; k <= 3; ++k) {
      const Markov target = random_markov(gen, vocab, k == 2);
      std::vector<token_t> successor(vocab);
      for (std::size_t a = 0; a < vocab; ++a) {
        successor[a] =
            static_cast<token_t>(std::uniform_int_distribution<std::size_t>(0, vocab - 1)(gen));
      }
      INFO("V = " << vocab << ", k = " << k);
      SpeculativeLaw law(target, target, &successor, k);
      require_target_joint(law.first_tokens(0, 2), target, 0);
    }
  }
}
