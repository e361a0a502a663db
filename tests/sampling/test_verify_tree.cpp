// Token-tree verification (tree_verify.hpp):
//  1. chain-shaped trees give verify_chain / verify_chain_onehot / verify_chain_greedy bit for bit
//     (accepted count, next token, RNG counter), in float and double;
//  2. exactness by exhaustive enumeration in double: every branch of a verify call is measured
//     from the implementation itself (bisection over each uniform, in the order the call asks for
//     them), every drafted tree is weighted by its draft probability, and the emitted law of the
//     first depth + 1 tokens is compared with the target's to 1e-12. Nothing here uses the
//     formulas of the algorithm, only the target and draft tables;
//  3. each deliberately wrong rule (detail::TreeRule) fails that check by more than 1e-3;
//  4. chi-square of the first emitted token against p_0 with the production RNG (Philox, float
//     rows), at alpha = 1e-6 (three checks, one per proposal kind: a false alarm below 1e-5 per
//     run; the seeds are fixed, so a run is reproducible anyway);
//  5. every invalid input throws specdec::Error naming the problem.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec/sampling/tree_verify.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

using specdec::Error;
using specdec::token_t;
using specdec::sampling::PhiloxStream;
using specdec::sampling::PhiloxUniforms;
using specdec::sampling::sample_from;
using specdec::sampling::TreeError;
using specdec::sampling::TreeProposal;
using specdec::sampling::TreeVerifyOutcome;
using specdec::sampling::TreeVerifyResult;
using specdec::sampling::validate_tree;
using specdec::sampling::verify_tree;
using specdec::sampling::verify_tree_greedy;
using specdec::sampling::verify_tree_row;
using specdec::sampling::detail::TreeRule;
using specdec::test::random_distribution;

namespace {

using Parents = std::vector<std::int32_t>;
using Tokens = std::vector<token_t>;

constexpr double kTolerance = 1e-12;

/// The chain 0 - 1 - ... - (n-1).
Parents chain_parents(std::size_t n) {
  Parents parents(n);
  for (std::size_t i = 0; i < n; ++i) parents[i] = static_cast<std::int32_t>(i) - 1;
  return parents;
}

/// The length of the longest root-to-leaf path (in edges).
std::size_t tree_depth(const Parents& parents) {
  std::vector<std::size_t> depth(parents.size(), 0);
  std::size_t deepest = 0;
  for (std::size_t i = 1; i < parents.size(); ++i) {
    depth[i] = depth[static_cast<std::size_t>(parents[i])] + 1;
    deepest = std::max(deepest, depth[i]);
  }
  return deepest;
}

/// The emitted tokens of a result: the path's tokens, then next.
std::vector<token_t> emitted_tokens(const TreeVerifyResult& r, const std::vector<token_t>& tokens) {
  std::vector<token_t> out;
  for (const std::size_t node : r.path) out.push_back(tokens[node]);
  out.push_back(r.next);
  return out;
}

// ================================================================ 1. chain-shaped trees

/// A random distribution: dense (mode 0 or 3), sparse (mode 1), or (mode 2) supported on the
/// lower or the `upper` half of the vocabulary only (disjoint supports for p and q).
std::vector<double> random_row(std::mt19937_64& gen, std::size_t vocab, int mode, bool upper) {
  if (mode == 2 && vocab >= 2) {
    std::vector<double> r(vocab, 0.0);
    const std::size_t half = vocab / 2;
    const std::size_t begin = upper ? half : 0;
    const std::size_t end = upper ? vocab : half;
    const auto part = random_distribution(gen, end - begin, false);
    std::copy(part.begin(), part.end(), r.begin() + static_cast<std::ptrdiff_t>(begin));
    return r;
  }
  return random_distribution(gen, vocab, mode == 1);
}

template <class Real>
void append(std::vector<Real>& m, const std::vector<double>& row) {
  for (const double x : row) m.push_back(static_cast<Real>(x));
}

/// Coverage counters of the chain comparisons (so that the test fails if it never rejects).
struct Coverage {
  std::size_t all_accepted = 0;
  std::size_t rejected = 0;
};

template <class Real>
void compare_chain_case(std::mt19937_64& gen, std::size_t vocab, std::size_t k, int mode,
                        Coverage& coverage) {
  const std::size_t n = k + 1;
  std::vector<Real> p;
  std::vector<Real> q;
  std::vector<Real> q_tree;  // n rows: the chain's k rows and a leaf row that must not be read
  std::vector<token_t> draft;
  std::vector<token_t> argmax_draft;
  for (std::size_t i = 0; i <= k; ++i) {
    const auto pi = random_row(gen, vocab, mode, false);
    append(p, pi);
    if (i == k) break;
    auto qi = random_row(gen, vocab, mode, true);
    if (mode == 3) qi = pi;  // identical rows: everything accepted
    append(q, qi);
    std::size_t x = std::discrete_distribution<std::size_t>(qi.begin(), qi.end())(gen);
    if (std::uniform_int_distribution<int>(0, 4)(gen) == 0) {  // any token, even p = q = 0
      x = std::uniform_int_distribution<std::size_t>(0, vocab - 1)(gen);
    }
    draft.push_back(static_cast<token_t>(x));
    const auto best = specdec::sampling::argmax(std::span<const Real>(p.data() + i * vocab, vocab));
    argmax_draft.push_back(std::uniform_int_distribution<int>(0, 3)(gen) == 0
                               ? draft.back()
                               : static_cast<token_t>(best));
  }
  q_tree = q;
  q_tree.insert(q_tree.end(), vocab, std::numeric_limits<Real>::quiet_NaN());

  std::vector<token_t> tokens{static_cast<token_t>(gen() % vocab)};  // the root: not read
  tokens.insert(tokens.end(), draft.begin(), draft.end());
  std::vector<token_t> greedy_tokens{0};
  greedy_tokens.insert(greedy_tokens.end(), argmax_draft.begin(), argmax_draft.end());
  const Parents parents = chain_parents(n);
  const std::uint64_t seed = gen();
  const std::uint64_t stream = gen() % 64;
  const std::uint64_t counter = gen() % 100000;

  const auto same = [&](const specdec::sampling::VerifyResult& chain, const TreeVerifyResult& tree,
                        const PhiloxStream& a, const PhiloxStream& b) {
    REQUIRE(tree.path.size() == chain.accepted);
    for (std::size_t d = 0; d < tree.path.size(); ++d) REQUIRE(tree.path[d] == d + 1);
    REQUIRE(tree.next == chain.next);
    REQUIRE(a.counter() == b.counter());
  };

  // Sampled proposals, with and without replacement (a chain has no earlier siblings).
  for (const TreeProposal kind :
       {TreeProposal::sampled_with_replacement, TreeProposal::sampled_without_replacement}) {
    PhiloxStream a(seed, stream, counter);
    PhiloxStream b(seed, stream, counter);
    const auto chain = specdec::sampling::verify_chain<Real>(p, q, draft, vocab, a);
    const auto tree = verify_tree<Real>(p, q_tree, tokens, parents, vocab, kind, b);
    same(chain, tree, a, b);
    (chain.accepted == k ? coverage.all_accepted : coverage.rejected) += 1;
  }
  {  // Point masses: verify_chain_onehot.
    PhiloxStream a(seed, stream, counter);
    PhiloxStream b(seed, stream, counter);
    const auto chain = specdec::sampling::verify_chain_onehot<Real>(p, draft, vocab, a);
    const auto tree = verify_tree<Real>(p, {}, tokens, parents, vocab, TreeProposal::point_mass, b);
    same(chain, tree, a, b);
    // The overload that infers V from p.
    PhiloxStream c(seed, stream, counter);
    const auto inferred = verify_tree<Real>(p, {}, tokens, parents, TreeProposal::point_mass, c);
    REQUIRE(inferred.path == tree.path);
    REQUIRE(inferred.next == tree.next);
  }
  {  // Greedy.
    const auto chain = specdec::sampling::verify_chain_greedy<Real>(p, argmax_draft, vocab);
    const auto tree = verify_tree_greedy<Real>(p, greedy_tokens, parents, vocab);
    REQUIRE(tree.path.size() == chain.accepted);
    for (std::size_t d = 0; d < tree.path.size(); ++d) REQUIRE(tree.path[d] == d + 1);
    REQUIRE(tree.next == chain.next);
    const auto inferred = verify_tree_greedy<Real>(p, greedy_tokens, parents);
    REQUIRE(inferred.next == tree.next);
  }
}

template <class Real>
void compare_chains(std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const std::size_t vocabs[] = {1, 2, 3, 5, 8, 17, 64, 257, 600};
  Coverage coverage;
  for (int trial = 0; trial < 6300; ++trial) {
    const std::size_t vocab = vocabs[trial % 9];
    const std::size_t k = static_cast<std::size_t>(trial / 9) % 7;
    const int mode = (trial / 63) % 4;  // dense, sparse, disjoint supports, q == p
    INFO("trial " << trial << ": V = " << vocab << ", k = " << k << ", mode " << mode);
    compare_chain_case<Real>(gen, vocab, k, mode, coverage);
  }
  CHECK(coverage.all_accepted > 500);
  CHECK(coverage.rejected > 1000);
}

TEST_CASE("tree: a chain-shaped tree is verify_chain / _onehot / _greedy bit for bit (float)",
          "[verify][tree]") {
  compare_chains<float>(11);
}

TEST_CASE("tree: a chain-shaped tree is verify_chain / _onehot / _greedy bit for bit (double)",
          "[verify][tree]") {
  compare_chains<double>(12);
}

TEST_CASE("tree: the counter moves by n whatever the outcome", "[verify][tree]") {
  std::mt19937_64 gen(13);
  const Parents parents{-1, 0, 0, 0, 1, 1, 3};
  const std::size_t vocab = 6;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> p;
    std::vector<double> q;
    for (std::size_t i = 0; i < parents.size(); ++i) {
      append(p, random_distribution(gen, vocab, trial % 2 == 0));
      append(q, random_distribution(gen, vocab, trial % 3 == 0));
    }
    std::vector<token_t> tokens(parents.size());
    for (auto& t : tokens) t = static_cast<token_t>(gen() % vocab);
    for (const TreeProposal kind :
         {TreeProposal::sampled_with_replacement, TreeProposal::point_mass}) {
      PhiloxStream rng(trial, 3, 1000);
      const auto r = kind == TreeProposal::point_mass
                         ? verify_tree<double>(p, {}, tokens, parents, vocab, kind, rng)
                         : verify_tree<double>(p, q, tokens, parents, vocab, kind, rng);
      REQUIRE(rng.counter() == 1000 + parents.size());
      // The path is a root-to-node path.
      std::size_t expected_parent = 0;
      for (const std::size_t node : r.path) {
        REQUIRE(static_cast<std::size_t>(parents[node]) == expected_parent);
        expected_parent = node;
      }
    }
  }
}

// ================================================================ 2. exhaustive enumeration

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

/// A verify call as a function of its uniforms (offsets 0 ... n-1); it appends the offsets it
/// asks for, in order, to `requested`.
using TreeCall =
    std::function<TreeVerifyOutcome(const std::vector<double>& us, std::vector<std::size_t>&)>;

/// One branch of a verify call: the accepted path (its last node), next and its probability.
struct TreeBranch {
  std::size_t node;
  token_t next;
  double probability;
};

bool on_path(std::size_t node, const Parents& parents, std::size_t j) {
  for (std::size_t v = node; v != 0; v = static_cast<std::size_t>(parents[v])) {
    if (v == j) return true;
  }
  return false;
}

/// All branches of one verify call over independent uniforms u_0 ... u_(n-1) ~ U[0, 1), measured
/// from the implementation: the uniforms are explored in the order the call asks for them; a
/// node test (offset j - 1) is a threshold on its uniform of "node j is on the accepted path"
/// (found by bisection), the final offset n - 1 a nondecreasing step function of next (its steps
/// found by bisection). Also checks the counter convention: offsets asked in increasing order,
/// each non-final offset j - 1 is the test of a child j of the root or of an accepted node, and
/// the final sample uses n - 1, last.
std::vector<TreeBranch> enumerate_tree_branches(const TreeCall& call, const Parents& parents,
                                                std::size_t vocab) {
  const std::size_t n = parents.size();
  const std::size_t last = n - 1;
  std::vector<double> us(n, 0.5);
  std::vector<bool> fixed(n, false);
  std::vector<std::size_t> requested;
  std::vector<TreeBranch> branches;

  const auto run = [&]() {
    requested.clear();
    const TreeVerifyOutcome out = call(us, requested);
    specdec::sampling::throw_if_error(out, "enumeration");
    if (requested.empty() || requested.back() != last) {
      throw std::logic_error("the final sample must use offset n - 1, last");
    }
    for (std::size_t r = 0; r + 1 < requested.size(); ++r) {
      if (r > 0 && requested[r] <= requested[r - 1]) {
        throw std::logic_error("offsets are not asked in increasing order");
      }
      const std::size_t j = requested[r] + 1;
      const auto parent = static_cast<std::size_t>(parents[j]);
      if (parent != 0 && !on_path(out.node, parents, parent)) {
        throw std::logic_error("a node whose parent is not on the accepted path was tested");
      }
    }
    for (std::size_t v = out.node; v != 0; v = static_cast<std::size_t>(parents[v])) {
      if (std::find(requested.begin(), requested.end(), v - 1) == requested.end()) {
        throw std::logic_error("an accepted node was not tested with offset node - 1");
      }
    }
    return out;
  };

  const auto final_token = [&](double weight) {
    double previous = 0.0;
    for (std::size_t y = 0; y < vocab; ++y) {
      const double t = specdec::test::threshold([&](double u) {
        us[last] = u;
        return run().next <= static_cast<token_t>(y);
      });
      if (t > previous) {
        us[last] = 0.5 * (previous + t);
        const TreeVerifyOutcome out = run();
        if (out.next != static_cast<token_t>(y)) {
          throw std::logic_error("the final token is not monotone in its uniform");
        }
        branches.push_back({out.node, out.next, weight * (t - previous)});
        previous = t;
      }
    }
    us[last] = 0.5;
  };

  std::function<void(double)> explore = [&](double weight) {
    run();
    std::size_t offset = n;
    for (const std::size_t r : requested) {
      if (!fixed[r]) {
        offset = r;
        break;
      }
    }
    if (offset == last) {
      final_token(weight);
      return;
    }
    const std::size_t j = offset + 1;
    const double t = specdec::test::threshold([&](double u) {
      us[offset] = u;
      return on_path(run().node, parents, j);
    });
    fixed[offset] = true;
    if (t > 0) {
      us[offset] = 0.5 * t;
      explore(weight * t);
    }
    if (t < 1) {
      us[offset] = 0.5 * (1.0 + t);
      explore(weight * (1.0 - t));
    }
    fixed[offset] = false;
    us[offset] = 0.5;
  };
  explore(1.0);
  return branches;
}

/// verify_tree_row with the rule `rule`, over double rows and recorded double uniforms.
TreeVerifyOutcome call_rule(TreeRule rule, const std::vector<double>& p,
                            const std::vector<double>& q, const std::vector<token_t>& tokens,
                            const Parents& parents, std::size_t vocab, TreeProposal kind,
                            const std::vector<double>& us, std::vector<std::size_t>& requested) {
  std::vector<double> scratch(vocab);
  const auto uniform = [&](std::size_t j) {
    requested.push_back(j);
    return us[j];
  };
  const double* q_ptr = kind == TreeProposal::point_mass ? nullptr : q.data();
  const std::size_t n = tokens.size();
  switch (rule) {
    case TreeRule::exact:
      return verify_tree_row<TreeRule::exact>(p.data(), q_ptr, tokens.data(), parents.data(), n,
                                              vocab, kind, uniform, scratch.data());
    case TreeRule::stale_residual:
      return verify_tree_row<TreeRule::stale_residual>(
          p.data(), q_ptr, tokens.data(), parents.data(), n, vocab, kind, uniform, scratch.data());
    case TreeRule::unnormalised_remainder:
      return verify_tree_row<TreeRule::unnormalised_remainder>(
          p.data(), q_ptr, tokens.data(), parents.data(), n, vocab, kind, uniform, scratch.data());
    case TreeRule::point_mass_keeps_token:
      return verify_tree_row<TreeRule::point_mass_keeps_token>(
          p.data(), q_ptr, tokens.data(), parents.data(), n, vocab, kind, uniform, scratch.data());
  }
  throw std::logic_error("unknown rule");
}

/// Adds to `law` the first `length` tokens of: `emitted`, then the target's Markov continuation.
void add_emitted(Joint& law, const Markov& target, Sequence emitted, double weight,
                 std::size_t length) {
  if (emitted.size() >= length) {
    emitted.resize(length);
    law[emitted] += weight;
    return;
  }
  const double* row = target.row(emitted.back());
  for (std::size_t y = 0; y < target.vocab; ++y) {
    if (row[y] == 0) continue;
    Sequence longer = emitted;
    longer.push_back(static_cast<token_t>(y));
    add_emitted(law, target, longer, weight * row[y], length);
  }
}

/// Adds the law of one round over the fixed tree (tokens[0] = the context), weighted by `weight`.
void add_tree_law(Joint& law, const Markov& target, const Markov* draft,
                  const std::vector<token_t>& tokens, const Parents& parents, TreeProposal kind,
                  TreeRule rule, double weight, std::size_t length) {
  const std::size_t vocab = target.vocab;
  std::vector<double> p;
  std::vector<double> q;
  for (const token_t t : tokens) {
    p.insert(p.end(), target.row(t), target.row(t) + vocab);
    if (draft != nullptr) q.insert(q.end(), draft->row(t), draft->row(t) + vocab);
  }
  const TreeCall call = [&](const std::vector<double>& us, std::vector<std::size_t>& requested) {
    return call_rule(rule, p, q, tokens, parents, vocab, kind, us, requested);
  };
  for (const TreeBranch& b : enumerate_tree_branches(call, parents, vocab)) {
    Sequence emitted;
    for (std::size_t v = b.node; v != 0; v = static_cast<std::size_t>(parents[v])) {
      emitted.insert(emitted.begin(), tokens[v]);
    }
    emitted.push_back(b.next);
    add_emitted(law, target, emitted, weight * b.probability, length);
  }
}

/// Calls visit(tokens, probability) for every tree of tokens the drafter can propose on the
/// shape `parents` after `context`: the children of node i are drawn from draft.row(tokens[i]),
/// i.i.d. (with replacement) or successively from what the earlier siblings left, renormalised
/// (without replacement). Returns the total probability visited (1 for a complete enumeration).
double for_each_draw(const Markov& draft, const Parents& parents, token_t context, bool without,
                     const std::function<void(const std::vector<token_t>&, double)>& visit) {
  const std::size_t n = parents.size();
  std::vector<token_t> tokens(n, 0);
  tokens[0] = context;
  double total = 0;
  std::function<void(std::size_t, double)> draw = [&](std::size_t c, double weight) {
    if (c == n) {
      visit(tokens, weight);
      total += weight;
      return;
    }
    const double* row = draft.row(tokens[static_cast<std::size_t>(parents[c])]);
    std::vector<bool> taken(draft.vocab, false);
    if (without) {
      for (std::size_t s = 1; s < c; ++s) {
        if (parents[s] == parents[c]) taken[static_cast<std::size_t>(tokens[s])] = true;
      }
    }
    double left = 0;  // the mass the draw is renormalised by
    for (std::size_t y = 0; y < draft.vocab; ++y) left += taken[y] ? 0.0 : row[y];
    for (std::size_t y = 0; y < draft.vocab; ++y) {
      if (taken[y] || row[y] == 0) continue;
      tokens[c] = static_cast<token_t>(y);
      draw(c + 1, weight * row[y] / left);
    }
  };
  draw(1, 1.0);
  return total;
}

/// The largest |emitted - target| over all sequences of `length` tokens after `context`, and
/// |total - 1|.
double max_deviation(const Joint& law, const Markov& target, token_t context, std::size_t length) {
  const std::size_t vocab = target.vocab;
  std::size_t count = 1;
  for (std::size_t i = 0; i < length; ++i) count *= vocab;
  double worst = 0;
  double total = 0;
  for (std::size_t code = 0; code < count; ++code) {
    Sequence s(length);
    std::size_t rest = code;
    double want = 1;
    token_t prev = context;
    for (std::size_t i = 0; i < length; ++i) {
      s[i] = static_cast<token_t>(rest % vocab);
      rest /= vocab;
      want *= target.row(prev)[static_cast<std::size_t>(s[i])];
      prev = s[i];
    }
    const auto it = law.find(s);
    const double have = it == law.end() ? 0.0 : it->second;
    worst = std::max(worst, std::fabs(have - want));
    total += have;
  }
  if (law.size() > count) return 1.0;  // a sequence outside the vocabulary
  return std::max(worst, std::fabs(total - 1.0));
}

/// Deviation of the emitted law from the target's for sampled proposals on `parents`.
double sampled_deviation(const Markov& target, const Markov& draft, const Parents& parents,
                         token_t context, TreeProposal kind, TreeRule rule = TreeRule::exact) {
  const std::size_t length = tree_depth(parents) + 1;
  Joint law;
  const double drawn =
      for_each_draw(draft, parents, context, kind == TreeProposal::sampled_without_replacement,
                    [&](const std::vector<token_t>& tokens, double w) {
                      add_tree_law(law, target, &draft, tokens, parents, kind, rule, w, length);
                    });
  return std::max(max_deviation(law, target, context, length), std::fabs(drawn - 1.0));
}

/// Deviation for point-mass proposals on the fixed tree `tokens`.
double point_mass_deviation(const Markov& target, const std::vector<token_t>& tokens,
                            const Parents& parents, TreeRule rule = TreeRule::exact) {
  const std::size_t length = tree_depth(parents) + 1;
  Joint law;
  add_tree_law(law, target, nullptr, tokens, parents, TreeProposal::point_mass, rule, 1.0, length);
  return max_deviation(law, target, tokens[0], length);
}

/// The fixed tree whose children of node i are the top tokens of draft.row(tokens[i]) in order
/// (ties: lower index first; more children than tokens wrap around, repeating tokens).
std::vector<token_t> top_tokens_tree(const Markov& draft, const Parents& parents, token_t context) {
  const std::size_t n = parents.size();
  std::vector<token_t> tokens(n, context);
  for (std::size_t c = 1; c < n; ++c) {
    const auto parent = static_cast<std::size_t>(parents[c]);
    std::size_t rank = 0;
    for (std::size_t s = 1; s < c; ++s) rank += static_cast<std::size_t>(parents[s]) == parent;
    const double* row = draft.row(tokens[parent]);
    std::vector<std::size_t> order(draft.vocab);
    for (std::size_t y = 0; y < draft.vocab; ++y) order[y] = y;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return row[a] > row[b]; });
    tokens[c] = static_cast<token_t>(order[rank % draft.vocab]);
  }
  return tokens;
}

/// The tree shapes: a root with 2 or 3 children, children with 0 to 2 children, depth 1 to 3.
const std::vector<Parents>& shapes() {
  static const std::vector<Parents> all{
      {-1, 0, 0},              // root with 2 leaves
      {-1, 0, 0, 0},           // root with 3 leaves
      {-1, 0, 0, 1, 1, 2},     // depth 2: node 1 has 2 children, node 2 one
      {-1, 0, 0, 1, 3, 3},     // depth 3: 0 - 1 - 3 - {4, 5}, and 0 - 2
      {-1, 0, 0, 0, 1, 3, 3},  // depth 2: root 3 children, node 1 one child, node 3 two
      {-1, 0, 0, 0, 1, 4, 4},  // depth 3: 0 - 1 - 4 - {5, 6}, and 0 - {2, 3}
  };
  return all;
}

std::size_t max_siblings(const Parents& parents) {
  std::vector<std::size_t> count(parents.size(), 0);
  std::size_t most = 0;
  for (std::size_t i = 1; i < parents.size(); ++i) {
    most = std::max(most, ++count[static_cast<std::size_t>(parents[i])]);
  }
  return most;
}

}  // namespace

TEST_CASE("tree: exhaustive, sampled with replacement emits exactly the target's law",
          "[verify][tree][exhaustive]") {
  std::mt19937_64 gen(21);
  std::size_t cases = 0;
  for (std::size_t vocab = 2; vocab <= 4; ++vocab) {
    for (int trial = 0; trial < 3; ++trial) {
      // Dense rows; sparse rows; a sparse target with a dense draft (which proposes tokens the
      // target gives probability 0).
      const Markov target = random_markov(gen, vocab, trial >= 1);
      const Markov draft = random_markov(gen, vocab, trial == 1);
      for (std::size_t s = 0; s < shapes().size(); ++s) {
        const auto context = static_cast<token_t>((s + static_cast<std::size_t>(trial)) % vocab);
        INFO("V = " << vocab << ", trial " << trial << ", shape " << s);
        REQUIRE(sampled_deviation(target, draft, shapes()[s], context,
                                  TreeProposal::sampled_with_replacement) <= kTolerance);
        ++cases;
      }
    }
  }
  CHECK(cases == 3 * 3 * shapes().size());
}

TEST_CASE("tree: exhaustive, sampled without replacement emits exactly the target's law",
          "[verify][tree][exhaustive]") {
  std::mt19937_64 gen(22);
  std::size_t cases = 0;
  for (std::size_t vocab = 2; vocab <= 4; ++vocab) {
    for (int trial = 0; trial < 2; ++trial) {
      // The draft is dense (every shape can be filled with distinct siblings); the target is
      // sparse in the second trial.
      const Markov target = random_markov(gen, vocab, trial == 1);
      const Markov draft = random_markov(gen, vocab, false);
      for (std::size_t s = 0; s < shapes().size(); ++s) {
        if (max_siblings(shapes()[s]) > vocab) continue;
        const auto context = static_cast<token_t>(s % vocab);
        INFO("V = " << vocab << ", trial " << trial << ", shape " << s);
        REQUIRE(sampled_deviation(target, draft, shapes()[s], context,
                                  TreeProposal::sampled_without_replacement) <= kTolerance);
        ++cases;
      }
    }
  }
  CHECK(cases >= 25);
}

TEST_CASE("tree: exhaustive, point masses (top-m trees and arbitrary fixed trees) are exact",
          "[verify][tree][exhaustive]") {
  std::mt19937_64 gen(23);
  std::size_t cases = 0;
  std::size_t impossible = 0;  // arbitrary tokens that the target gives probability 0
  std::size_t repeated = 0;    // arbitrary tokens equal to an earlier sibling's
  for (std::size_t vocab = 2; vocab <= 4; ++vocab) {
    for (int trial = 0; trial < 4; ++trial) {
      const Markov target = random_markov(gen, vocab, trial % 2 == 1);
      const Markov draft = random_markov(gen, vocab, false);
      for (std::size_t s = 0; s < shapes().size(); ++s) {
        const Parents& parents = shapes()[s];
        const auto context = static_cast<token_t>((s + static_cast<std::size_t>(trial)) % vocab);
        INFO("V = " << vocab << ", trial " << trial << ", shape " << s);
        // The top tokens of the draft row at every node.
        REQUIRE(point_mass_deviation(target, top_tokens_tree(draft, parents, context), parents) <=
                kTolerance);
        // Arbitrary tokens: repeated siblings, tokens the target gives probability 0.
        std::vector<token_t> tokens(parents.size(), context);
        for (std::size_t i = 1; i < tokens.size(); ++i) {
          tokens[i] = static_cast<token_t>(gen() % vocab);
          const auto parent = static_cast<std::size_t>(parents[i]);
          impossible += target.row(tokens[parent])[static_cast<std::size_t>(tokens[i])] == 0;
          for (std::size_t s2 = 1; s2 < i; ++s2) {
            repeated += static_cast<std::size_t>(parents[s2]) == parent && tokens[s2] == tokens[i];
          }
        }
        REQUIRE(point_mass_deviation(target, tokens, parents) <= kTolerance);
        cases += 2;
      }
    }
  }
  CHECK(cases >= 100);
  CHECK(impossible >= 5);
  CHECK(repeated >= 5);
}

// ================================================================ 3. mutation checks

TEST_CASE("tree: each wrong rule breaks the exhaustive law check", "[verify][tree][exhaustive]") {
  std::mt19937_64 gen(31);
  const std::size_t vocab = 3;
  const Markov target = random_markov(gen, vocab, false);
  const Markov draft = random_markov(gen, vocab, false);
  const Parents& three = shapes()[1];  // root with 3 children
  const Parents& deep = shapes()[2];   // depth 2, node 1 with 2 children

  SECTION("the residual is not updated after a rejection") {
    double worst = 0;
    for (const TreeProposal kind :
         {TreeProposal::sampled_with_replacement, TreeProposal::sampled_without_replacement}) {
      CHECK(sampled_deviation(target, draft, three, 0, kind) <= kTolerance);
      const double d = sampled_deviation(target, draft, three, 0, kind, TreeRule::stale_residual);
      INFO("stale residual, proposal " << static_cast<int>(kind) << ": deviation " << d);
      worst = std::max(worst, d);
    }
    const auto tokens = top_tokens_tree(draft, deep, 1);
    CHECK(point_mass_deviation(target, tokens, deep) <= kTolerance);
    worst = std::max(worst, point_mass_deviation(target, tokens, deep, TreeRule::stale_residual));
    REQUIRE(worst > 1e-3);
  }
  SECTION("without replacement, r_c is not renormalised") {
    double worst = 0;
    for (const Parents* shape : {&three, &deep}) {
      CHECK(sampled_deviation(target, draft, *shape, 2,
                              TreeProposal::sampled_without_replacement) <= kTolerance);
      worst = std::max(worst, sampled_deviation(target, draft, *shape, 2,
                                                TreeProposal::sampled_without_replacement,
                                                TreeRule::unnormalised_remainder));
    }
    REQUIRE(worst > 1e-3);
  }
  SECTION("point mass: the rejected token keeps its weight") {
    double worst = 0;
    const std::vector<std::vector<token_t>> trees{top_tokens_tree(draft, three, 0),
                                                  {0, 1, 1, 2},  // a repeated sibling
                                                  top_tokens_tree(draft, deep, 2)};
    for (const auto& tokens : trees) {
      const Parents& parents = tokens.size() == three.size() ? three : deep;
      CHECK(point_mass_deviation(target, tokens, parents) <= kTolerance);
      worst = std::max(
          worst, point_mass_deviation(target, tokens, parents, TreeRule::point_mass_keeps_token));
    }
    REQUIRE(worst > 1e-3);
  }
}

// ================================================================ greedy on branching trees

TEST_CASE("tree: greedy emits the target's greedy decoding and accepts every matching child",
          "[verify][tree]") {
  std::mt19937_64 gen(41);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t vocab = 2 + static_cast<std::size_t>(trial % 5);
    // A Markov target whose rows have ties now and then (lowest index wins).
    Markov target = random_markov(gen, vocab, trial % 2 == 0);
    if (trial % 3 == 0) {
      for (double& x : target.table) x = std::round(x * 4.0) / 4.0;
      for (std::size_t a = 0; a < vocab; ++a) {
        double total = 0;
        for (std::size_t y = 0; y < vocab; ++y) total += target.table[a * vocab + y];
        if (total == 0) target.table[a * vocab] = total = 1.0;
        for (std::size_t y = 0; y < vocab; ++y) target.table[a * vocab + y] /= total;
      }
    }
    const Parents& parents = shapes()[static_cast<std::size_t>(trial) % shapes().size()];
    const std::size_t n = parents.size();
    std::vector<token_t> tokens(n, static_cast<token_t>(gen() % vocab));
    for (std::size_t i = 1; i < n; ++i) tokens[i] = static_cast<token_t>(gen() % vocab);
    std::vector<double> p;
    for (const token_t t : tokens) p.insert(p.end(), target.row(t), target.row(t) + vocab);
    const auto r = verify_tree_greedy<double>(p, tokens, parents, vocab);

    // The emitted tokens are the target's greedy decoding after tokens[0].
    const auto emitted = emitted_tokens(r, tokens);
    token_t prev = tokens[0];
    for (const token_t t : emitted) {
      const double* row = target.row(prev);
      REQUIRE(t == static_cast<token_t>(std::max_element(row, row + vocab) - row));
      prev = t;
    }
    // The path is maximal: the node where it ends has no child with the next token, and each
    // accepted node is the first of its siblings with its token.
    const std::size_t end = r.path.empty() ? 0 : r.path.back();
    for (std::size_t c = 1; c < n; ++c) {
      if (static_cast<std::size_t>(parents[c]) == end) REQUIRE(tokens[c] != r.next);
    }
    for (const std::size_t node : r.path) {
      for (std::size_t s = 1; s < node; ++s) {
        if (parents[s] == parents[node]) REQUIRE(tokens[s] != tokens[node]);
      }
    }
  }
}

TEST_CASE("tree: edge cases of the residual, driven by explicit uniforms", "[verify][tree]") {
  const std::size_t vocab = 3;
  const Parents parents{-1, 0, 0};
  std::vector<double> scratch(vocab);
  const auto run = [&](const std::vector<double>& p, const std::vector<double>& q,
                       const Tokens& tokens, TreeProposal kind, const std::vector<double>& us) {
    const TreeVerifyOutcome out = verify_tree_row(
        p.data(), kind == TreeProposal::point_mass ? nullptr : q.data(), tokens.data(),
        parents.data(), parents.size(), vocab, kind, [&](std::size_t j) { return us.at(j); },
        scratch.data());
    specdec::sampling::throw_if_error(out, "edge case");
    return out;
  };
  std::vector<double> p{0.5, 0.5, 0.0};  // rows of nodes 0, 1, 2
  p.insert(p.end(), {0.0, 0.0, 1.0});
  p.insert(p.end(), {0.0, 1.0, 0.0});

  SECTION("a residual without mass after two rejections falls back to p_i") {
    // u = 1 (outside [0, 1): only to reach the fallback) rejects node 2 although w(1) = Z.
    const Tokens tokens{0, 0, 1};
    auto out = run(p, {}, tokens, TreeProposal::point_mass, {0.9, 1.0, 0.25});
    CHECK(out.node == 0);
    CHECK(out.next == 0);
    out = run(p, {}, tokens, TreeProposal::point_mass, {0.9, 1.0, 0.75});
    CHECK(out.next == 1);  // never token 2, which p_0 gives 0
  }
  SECTION("a repeated point-mass sibling is rejected whatever its uniform") {
    const Tokens tokens{0, 1, 1};
    const auto out = run(p, {}, tokens, TreeProposal::point_mass, {0.99, 0.0, 0.1});
    CHECK(out.node == 0);
    CHECK(out.next == 0);  // p_0 without token 1
  }
  SECTION("without replacement, a sibling drawn from a remainder without mass") {
    // q_0 = [1, 0, 0]: the second child cannot have been drawn; it is accepted iff w(x) > 0
    // (like a q(x) = 0 token in verify_chain), and nothing divides by zero.
    std::vector<double> p2{0.2, 0.3, 0.5};
    p2.insert(p2.end(), p.begin() + 3, p.end());
    std::vector<double> q(9, 1.0 / 3.0);
    q[0] = 1.0;
    q[1] = q[2] = 0.0;
    const Tokens tokens{0, 0, 1};
    const auto out =
        run(p2, q, tokens, TreeProposal::sampled_without_replacement, {0.5, 0.999, 0.5});
    CHECK(out.node == 2);
    CHECK(out.next == 1);  // the bonus from p_2 = [0, 1, 0]
  }
}

// ================================================================ 4. chi-square

namespace {

/// Draws the children of every node of `parents` from the float rows q with `rng` (point mass:
/// the top tokens of the parent's row, without randomness).
void draw_tree(const std::vector<float>& q, const Parents& parents, std::size_t vocab,
               TreeProposal kind, PhiloxStream& rng, std::vector<token_t>& tokens,
               std::vector<float>& weights) {
  for (std::size_t c = 1; c < parents.size(); ++c) {
    const auto parent = static_cast<std::size_t>(parents[c]);
    const float* row = q.data() + parent * vocab;
    if (kind == TreeProposal::sampled_with_replacement) {
      tokens[c] = sample_from<float>(std::span<const float>(row, vocab), rng.next());
      continue;
    }
    weights.assign(row, row + vocab);
    for (std::size_t s = 1; s < c; ++s) {
      if (static_cast<std::size_t>(parents[s]) == parent) {
        weights[static_cast<std::size_t>(tokens[s])] = 0.0f;
      }
    }
    if (kind == TreeProposal::sampled_without_replacement) {
      tokens[c] = sample_from<float>(weights, rng.next());
    } else {
      tokens[c] = static_cast<token_t>(
          specdec::sampling::argmax(std::span<const float>(weights.data(), vocab)));
    }
  }
}

}  // namespace

TEST_CASE("tree: statistical, the first emitted token follows p_0 (Philox, float rows)",
          "[verify][tree][statistical]") {
  constexpr std::uint64_t kTrials = 1'000'000;
  constexpr double kAlpha = 1e-6;
  const std::size_t vocab = 16;
  const Parents parents{-1, 0, 0, 0, 1, 1, 2};  // 7 nodes: root with 3 children, depth 2
  const std::size_t n = parents.size();
  std::mt19937_64 gen(51);
  std::vector<float> p;
  std::vector<float> q;
  for (std::size_t i = 0; i < n; ++i) {
    append(p, random_distribution(gen, vocab, i % 2 == 0));  // p_0 sparse
    append(q, random_distribution(gen, vocab, i == 1));
  }
  const std::vector<float> none;
  std::vector<double> p0(vocab);
  double total = 0;
  for (std::size_t y = 0; y < vocab; ++y) total += p0[y] = p[y];
  for (double& x : p0) x /= total;

  for (const TreeProposal kind :
       {TreeProposal::sampled_with_replacement, TreeProposal::sampled_without_replacement,
        TreeProposal::point_mass}) {
    PhiloxStream draft_rng(61 + static_cast<std::uint64_t>(kind), 1);
    PhiloxStream verify_rng(61 + static_cast<std::uint64_t>(kind), 0);
    std::vector<token_t> tokens(n, 0);
    std::vector<float> weights;
    std::vector<std::uint64_t> first(vocab, 0);
    std::vector<std::uint64_t> depth(3, 0);
    const bool sampled = kind != TreeProposal::point_mass;
    if (!sampled) draw_tree(q, parents, vocab, kind, draft_rng, tokens, weights);  // fixed tree
    for (std::uint64_t t = 0; t < kTrials; ++t) {
      if (sampled) draw_tree(q, parents, vocab, kind, draft_rng, tokens, weights);
      const std::vector<float>& rows_q = sampled ? q : none;
      const auto r = verify_tree<float>(p, rows_q, tokens, parents, vocab, kind, verify_rng);
      ++first[static_cast<std::size_t>(r.path.empty() ? r.next : tokens[r.path[0]])];
      ++depth[r.path.size()];
    }
    const auto chi = specdec::test::chi_square(first, p0);
    INFO("proposal " << static_cast<int>(kind) << ": chi2 = " << chi.statistic << " on " << chi.dof
                     << " dof, p = " << chi.p_value << "; depths " << depth[0] << " " << depth[1]
                     << " " << depth[2]);
    CHECK(chi.impossible_hits == 0);
    CHECK(chi.p_value > kAlpha);
    CHECK(depth[1] + depth[2] > 0);  // the tree is used
    CHECK(depth[0] > 0);
  }
}

// ================================================================ 5. errors

TEST_CASE("tree: invalid inputs throw specdec::Error naming the problem", "[verify][tree]") {
  using Catch::Contains;
  const std::size_t vocab = 3;
  // Node 0 (root) with children 1 and 2; node 1 with child 3.
  const Parents parents{-1, 0, 0, 1};
  const std::vector<token_t> tokens{0, 1, 2, 0};
  const std::vector<double> row{0.5, 0.25, 0.25};
  std::vector<double> p;
  for (int i = 0; i < 4; ++i) p.insert(p.end(), row.begin(), row.end());
  const std::vector<double> q = p;
  const std::vector<double> none;
  PhiloxStream rng(1, 0);
  const auto sampled = [&](const std::vector<double>& pp, const std::vector<double>& qq,
                           const std::vector<token_t>& tt, const Parents& pa,
                           TreeProposal kind = TreeProposal::sampled_with_replacement) {
    return verify_tree<double>(pp, qq, tt, pa, vocab, kind, rng);
  };

  SECTION("shapes") {
    CHECK_THROWS_WITH(sampled(none, none, {}, {}), Contains("no nodes"));
    CHECK_THROWS_WITH(sampled(p, q, tokens, {-1, 0, 0}), Contains("parents has 3"));
    CHECK_THROWS_WITH(sampled(std::vector<double>(p.begin(), p.end() - 3), q, tokens, parents),
                      Contains("p (target distributions) has 9 entries"));
    CHECK_THROWS_WITH(sampled(p, std::vector<double>(q.begin(), q.end() - 1), tokens, parents),
                      Contains("q (draft distributions) has 11 entries"));
    CHECK_THROWS_WITH(
        verify_tree<double>(p, q, tokens, parents, vocab, TreeProposal::point_mass, rng),
        Contains("point_mass proposals have no draft rows"));
    CHECK_THROWS_WITH(
        verify_tree<double>(p, q, tokens, parents, 0, TreeProposal::sampled_with_replacement, rng),
        Contains("vocabulary size V is 0"));
    CHECK_THROWS_WITH(verify_tree<double>(std::vector<double>(p.begin(), p.end() - 1), q, tokens,
                                          parents, TreeProposal::sampled_with_replacement, rng),
                      Contains("not a positive multiple of n = 4"));
    CHECK_THROWS_WITH(verify_tree_greedy<double>(p, tokens, Parents{-1, 0}),
                      Contains("parents has 2"));
    CHECK(rng.counter() == 0);  // a failed call does not move the counter
  }
  SECTION("structure") {
    CHECK_THROWS_WITH(sampled(p, q, tokens, {0, 0, 0, 1}), Contains("must be -1"));
    CHECK_THROWS_WITH(sampled(p, q, tokens, {-1, 0, 2, 1}),
                      Contains("parents[2] = 2 is not an earlier node"));
    CHECK_THROWS_WITH(sampled(p, q, tokens, {-1, -1, 0, 1}),
                      Contains("parents[1] = -1 is not an earlier node"));
    CHECK_THROWS_WITH(sampled(p, q, {0, 1, 3, 0}, parents),
                      Contains("tokens[2] = 3 (node 2) is not a token id"));
    CHECK_THROWS_WITH(sampled(p, q, {0, 1, -1, 0}, parents), Contains("tokens[2] = -1"));
    CHECK_NOTHROW(sampled(p, q, {7, 1, 2, 0}, parents));  // the root's token is not read
    const std::vector<token_t> twins{0, 1, 1, 0};
    CHECK_THROWS_WITH(sampled(p, q, twins, parents, TreeProposal::sampled_without_replacement),
                      Contains("node 2 has the same token 1 as its earlier sibling node 1"));
    CHECK_NOTHROW(sampled(p, q, twins, parents, TreeProposal::sampled_with_replacement));
    CHECK_NOTHROW(
        verify_tree<double>(p, none, twins, parents, vocab, TreeProposal::point_mass, rng));
    CHECK_THROWS_WITH(verify_tree_greedy<double>(p, tokens, Parents{-1, 0, 5, 1}),
                      Contains("parents[2] = 5 is not an earlier node"));
  }
  SECTION("validate_tree") {
    CHECK_NOTHROW(validate_tree(tokens, parents, vocab));
    CHECK_THROWS_WITH(validate_tree({}, {}, vocab), Contains("no nodes"));
    CHECK_THROWS_WITH(validate_tree(tokens, Parents{-1, 0}, vocab), Contains("parents has 2"));
    CHECK_THROWS_WITH(validate_tree(tokens, parents, 0), Contains("vocabulary size V is 0"));
    CHECK_THROWS_WITH(validate_tree(tokens, Parents{3, 0, 0, 1}, vocab),
                      Contains("parents[0] = 3, but node 0 is the root"));
    CHECK_THROWS_WITH(validate_tree(tokens, Parents{-1, 0, 0, 3}, vocab),
                      Contains("parents[3] = 3 is not an earlier node"));
    CHECK_THROWS_WITH(validate_tree(tokens, parents, 2), Contains("tokens[2] = 2 (node 2)"));
    CHECK_THROWS_WITH(validate_tree(Tokens{0, 1, 1}, Parents{-1, 0, 0}, vocab,
                                    TreeProposal::sampled_without_replacement),
                      Contains("same token 1"));
    CHECK_NOTHROW(validate_tree(Tokens{0, 1, 1}, Parents{-1, 0, 0}, vocab));
  }
  SECTION("values and rows") {
    auto bad_p = p;
    bad_p[1] = std::numeric_limits<double>::quiet_NaN();  // row 0 at token 1 (node 1's token)
    CHECK_THROWS_WITH(sampled(bad_p, q, tokens, parents),
                      Contains("p row of node 0 at the token of its child node 1 is nan"));
    auto bad_q = q;
    bad_q[1] = -0.5;
    CHECK_THROWS_WITH(sampled(p, bad_q, tokens, parents),
                      Contains("q row of node 0 at the token of its child node 1 is -0.5"));
    // Rows read in full: at a rejection (p_0(1) = 0 < q_0(1): node 1 is always rejected).
    std::vector<double> p_rej = p;
    p_rej[0] = 0.25;
    p_rej[1] = 0.0;  // row 0 = [0.25, 0, 0.25]: sums to 0.5
    std::vector<double> q_rej = q;
    q_rej[0] = 0.0;
    q_rej[1] = 1.0;
    q_rej[2] = 0.0;
    CHECK_THROWS_WITH(sampled(p_rej, q_rej, tokens, parents),
                      Contains("p row of node 0 sums to 0.5"));
    p_rej[0] = 0.5;  // a valid row 0 again, and a q row 0 with a negative entry elsewhere
    p_rej[2] = 0.5;
    q_rej[0] = -0.25;
    q_rej[1] = 1.25;
    CHECK_THROWS_WITH(sampled(p_rej, q_rej, tokens, parents),
                      Contains("q row of node 0 has a NaN, infinite or negative entry"));
    // The bonus row of a leaf reached (all accepted: q == p).
    auto bad_leaf = p;
    bad_leaf[3 * vocab + 2] = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(sampled(bad_leaf, q, {0, 0, 2, 0}, parents),
                      Contains("p row of node 3 has a NaN, infinite or negative entry"));
    // Point masses: the rows read at a rejection.
    std::vector<double> p_pm = p;
    p_pm[0] = 0.0;  // row 0 = [0, 0.25, 0.25]: node 1 (token 0) is rejected, sum 0.5
    CHECK_THROWS_WITH(verify_tree<double>(p_pm, none, Tokens{0, 0, 2, 0}, parents, vocab,
                                          TreeProposal::point_mass, rng),
                      Contains("p row of node 0 sums to 0.5"));
    // Greedy: a NaN in a row read.
    auto bad_greedy = p;
    bad_greedy[vocab + 1] = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(verify_tree_greedy<double>(bad_greedy, Tokens{0, 0, 2, 0}, parents, vocab),
                      Contains("p row of node 1 has a NaN"));
  }
  SECTION("the raw core reports missing buffers") {
    const auto uniform = [](std::size_t) { return 0.5; };
    const TreeVerifyOutcome no_scratch = verify_tree_row(
        p.data(), q.data(), tokens.data(), parents.data(), 4, vocab,
        TreeProposal::sampled_with_replacement, uniform, static_cast<double*>(nullptr));
    CHECK(no_scratch.tree_error == TreeError::missing_buffer);
    std::vector<double> scratch(vocab);
    const TreeVerifyOutcome no_q = verify_tree_row(
        p.data(), static_cast<const double*>(nullptr), tokens.data(), parents.data(), 4, vocab,
        TreeProposal::sampled_with_replacement, uniform, scratch.data());
    CHECK(no_q.tree_error == TreeError::missing_buffer);
    CHECK_THROWS_WITH(specdec::sampling::throw_if_error(no_q, "core"), Contains("q for a sampled"));
    // A chain needs no scratch row.
    const Parents chain = chain_parents(4);
    const TreeVerifyOutcome ok = verify_tree_row(p.data(), q.data(), tokens.data(), chain.data(), 4,
                                                 vocab, TreeProposal::sampled_with_replacement,
                                                 uniform, static_cast<double*>(nullptr));
    CHECK(ok.tree_error == TreeError::none);
    CHECK(ok.error == specdec::sampling::VerifyError::none);
  }
}
