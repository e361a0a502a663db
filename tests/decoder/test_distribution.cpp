// The law of the first three emitted tokens of SpeculativeDecoder, over many seeds, equals the
// law of target-only sampling with the same processing — exactly computed here by enumerating
// the target's processed distributions over the 4^3 continuations of a tiny vocabulary.
//
// Test: Pearson's chi-square goodness of fit over the continuations with nonzero probability,
// at significance 1e-3 per configuration (with 31 configurations, a correct implementation fails
// one of them with probability about 3% for a random set of seeds; the seeds here are fixed, so
// the test is deterministic). A continuation of probability 0 must never appear at all. The
// seeds are 0 .. kSeeds-1; each run uses the decoder's own Philox streams for that seed.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::GenerationConfig;
using specdec::SpeculativeOptions;
using specdec::token_t;
using specdec::sampling::SamplingParams;
using specdec::test::MockLM;

namespace {

constexpr std::size_t kVocab = 4;
constexpr std::size_t kDepth = 3;  // tokens of each run whose joint law is tested
constexpr std::size_t kCells = kVocab * kVocab * kVocab;
constexpr std::uint64_t kSeeds = 30000;
constexpr double kSignificance = 1e-3;

// ------------------------------------------------------------------ chi-square tail probability

/// Regularised upper incomplete gamma Q(a, x) (series for x < a + 1, continued fraction
/// otherwise; Numerical Recipes, 3rd ed., section 6.2).
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-15; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Lentz's method for the continued fraction.
  const double tiny = 1e-300;
  double b = x + 1 - a;
  double c = 1 / tiny;
  double d = 1 / b;
  double h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1) < 1e-15) break;
  }
  return std::exp(log_prefactor) * h;
}

/// P(X >= statistic) for X chi-square with `dof` degrees of freedom.
double chi_square_tail(double statistic, std::size_t dof) {
  return gamma_q(static_cast<double>(dof) / 2, statistic / 2);
}

// ------------------------------------------------------------------ toy models

/// Logits of an order-2 Markov model with a position dependency: row (last, before-last,
/// position parity) of a table of random logits. Some entries are very negative so that the
/// filters (top-k, top-p, min-p) cut tokens, and so that p and q differ strongly in places.
struct ToyModel {
  std::vector<float> table;  // [V (last) x V (before last) x 2 (parity) x V]

  explicit ToyModel(std::uint32_t seed) : table(kVocab * kVocab * 2 * kVocab) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    for (auto& x : table) x = dist(gen);
  }

  [[nodiscard]] std::vector<float> logits(std::span<const token_t> prefix) const {
    const auto last = static_cast<std::size_t>(prefix.back());
    const auto before = prefix.size() > 1 ? static_cast<std::size_t>(prefix[prefix.size() - 2]) : 0;
    const std::size_t offset = ((last * kVocab + before) * 2 + prefix.size() % 2) * kVocab;
    return {table.begin() + static_cast<std::ptrdiff_t>(offset),
            table.begin() + static_cast<std::ptrdiff_t>(offset + kVocab)};
  }

  [[nodiscard]] MockLM lm(std::size_t context = 64) const {
    return MockLM(kVocab, context,
                  [this](std::span<const token_t> prefix) { return logits(prefix); });
  }
};

/// The exact law of the first kDepth tokens of target-only sampling after `prompt` (with
/// penalties: each row adjusted for its own context, the whole sequence or the completion).
std::array<double, kCells> exact_law(const ToyModel& target, const std::vector<token_t>& prompt,
                                     const SamplingParams& params,
                                     const specdec::sampling::Penalties& penalties = {}) {
  std::array<double, kCells> law{};
  for (std::size_t cell = 0; cell < kCells; ++cell) {
    std::vector<token_t> seq = prompt;
    double prob = 1;
    std::size_t rest = cell;
    for (std::size_t i = 0; i < kDepth; ++i) {
      const auto t = static_cast<token_t>(rest % kVocab);
      rest /= kVocab;
      const std::span<const token_t> context =
          penalties.scope == specdec::sampling::PenaltyScope::context
              ? std::span<const token_t>(seq)
              : std::span<const token_t>(seq).subspan(prompt.size());
      const auto probs = specdec::sampling::process_logits<double>(
          specdec::sampling::apply_penalties(penalties, context, target.logits(seq)), params);
      prob *= probs[static_cast<std::size_t>(t)];
      seq.push_back(t);
    }
    law[cell] = prob;
  }
  return law;
}

std::size_t cell_of(const std::vector<token_t>& tokens) {
  std::size_t cell = 0;
  for (std::size_t i = kDepth; i-- > 0;) cell = cell * kVocab + static_cast<std::size_t>(tokens[i]);
  return cell;
}

/// Pearson's chi-square p-value of the first kDepth tokens of `generate(seed)` over every seed
/// against `law`; `impossible`: how many runs gave a continuation of probability 0.
template <class Generate>
double law_p_value(const std::array<double, kCells>& law, Generate&& generate,
                   std::uint64_t& impossible) {
  std::array<std::uint64_t, kCells> counts{};
  for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
    const std::vector<token_t> tokens = generate(seed);
    REQUIRE(tokens.size() == kDepth);
    ++counts[cell_of(tokens)];
  }
  double statistic = 0;
  std::size_t cells = 0;
  impossible = 0;
  for (std::size_t c = 0; c < kCells; ++c) {
    if (law[c] == 0) {
      impossible += counts[c];
      continue;
    }
    const double expected = law[c] * static_cast<double>(kSeeds);
    statistic += (static_cast<double>(counts[c]) - expected) *
                 (static_cast<double>(counts[c]) - expected) / expected;
    ++cells;
  }
  const double p_value = chi_square_tail(statistic, cells - 1);
  INFO("chi-square " << statistic << " with " << cells - 1
                     << " degrees of freedom, p = " << p_value);
  return p_value;
}

/// Runs `generate(seed)` for every seed and checks its first kDepth tokens against `law`.
template <class Generate>
void check_law(const std::array<double, kCells>& law, Generate&& generate) {
  std::uint64_t impossible = 0;
  const double p_value = law_p_value(law, generate, impossible);
  INFO("chi-square p = " << p_value);
  CHECK(p_value > kSignificance);
  CHECK(impossible == 0);
}

GenerationConfig sampling_config(const SamplingParams& params, std::uint64_t seed) {
  GenerationConfig cfg;
  cfg.max_new_tokens = kDepth;
  cfg.sampling = params;
  cfg.seed = seed;
  return cfg;
}

/// The tokens of suffix-drafter tree rounds of up to 6 nodes (matches of one token, every
/// continuation seen: trees that branch at most nodes).
std::vector<token_t> suffix_tree_tokens(const ToyModel& target_model,
                                        const std::vector<token_t>& prompt,
                                        const GenerationConfig& config) {
  MockLM target = target_model.lm();
  specdec::SuffixDrafter suffix({}, nullptr, {.max_nodes = 6, .min_score = 0.0f, .min_match = 1});
  specdec::SpeculativeDecoder dec(suffix, target, SpeculativeOptions{.max_tree_nodes = 6});
  return dec.generate(prompt, config).tokens;
}

/// The tokens of draft model trees of up to 5 nodes (every node verified; at temperature > 0 the
/// children are drawn from the draft without replacement).
/// node_cost > 0: the cost model's guess instead, a target step plus node_cost a node, which
/// cuts the trees (the first n where a node stops paying, for sampled candidates).
std::vector<token_t> model_tree_tokens(const ToyModel& target_model, const ToyModel& draft_model,
                                       const std::vector<token_t>& prompt,
                                       const GenerationConfig& config, double node_cost = 0) {
  MockLM target = target_model.lm();
  MockLM draft = draft_model.lm();
  specdec::ModelTreeDrafter<MockLM> trees(draft, {.branch = 2, .expand = 2, .max_depth = 3});
  SpeculativeOptions options;
  options.max_tree_nodes = 5;
  if (node_cost > 0)
    options.tree_node_cost = node_cost;
  else
    options.tree_cost.assign(6, 1.0);
  specdec::SpeculativeDecoder dec(trees, target, options);
  return dec.generate(prompt, config).tokens;
}

/// A wrong tree drafter, for the mutation checks: ModelTreeDrafter's sampled trees, changed by
/// `mutate` before the session verifies them.
template <class Mutate>
class MutatedTrees {
 public:
  MutatedTrees(specdec::ModelTreeDrafter<MockLM>& inner, Mutate mutate)
      : inner_(&inner), mutate_(std::move(mutate)) {}
  [[nodiscard]] std::size_t vocab_size() const { return inner_->vocab_size(); }
  [[nodiscard]] std::size_t max_draft(std::size_t n) const { return inner_->max_draft(n); }
  void start(std::span<const token_t> prompt) { inner_->start(prompt); }
  void extend(std::span<const token_t> sequence) { inner_->extend(sequence); }
  void keep(std::size_t n) { inner_->keep(n); }
  const specdec::DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t n) {
    return inner_->draft_tree(sequence, n);
  }
  template <class S>
  const specdec::DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t n,
                                       S& sampler) {
    tree_ = inner_->draft_tree(sequence, n, sampler);
    mutate_(tree_);
    return tree_;
  }
  template <class S>
  specdec::DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    return inner_->draft(sequence, k, sampler);
  }

 private:
  specdec::ModelTreeDrafter<MockLM>* inner_;
  Mutate mutate_;
  specdec::DraftTree tree_;
};

/// The tree without the nodes `drop` selects and their subtrees.
template <class Drop>
void remove_nodes(specdec::DraftTree& tree, Drop&& drop) {
  specdec::DraftTree kept = tree;
  kept.tokens.clear();
  kept.parents.clear();
  kept.scores.clear();
  kept.q_rows.assign(1, tree.q_rows.at(0));
  std::vector<std::int32_t> renumbered(tree.size(), -1);
  for (std::size_t i = 0; i < tree.size(); ++i) {
    const std::int32_t parent = tree.parents[i];
    if (parent >= 0 && renumbered[static_cast<std::size_t>(parent)] < 0) continue;
    if (drop(tree, i)) continue;
    renumbered[i] = static_cast<std::int32_t>(kept.size());
    kept.tokens.push_back(tree.tokens[i]);
    kept.parents.push_back(parent < 0 ? -1 : renumbered[static_cast<std::size_t>(parent)]);
    kept.scores.push_back(tree.scores[i]);
    kept.q_rows.push_back(tree.q_rows[i + 1]);
  }
  tree = std::move(kept);
}

/// The tokens of draft model trees of up to 5 nodes, each changed by `mutate`.
template <class Mutate>
std::vector<token_t> mutated_tree_tokens(const ToyModel& target_model, const ToyModel& draft_model,
                                         const std::vector<token_t>& prompt,
                                         const GenerationConfig& config, Mutate mutate) {
  MockLM target = target_model.lm();
  MockLM draft = draft_model.lm();
  specdec::ModelTreeDrafter<MockLM> inner(draft, {.branch = 2, .expand = 2, .max_depth = 3});
  MutatedTrees<Mutate> trees(inner, std::move(mutate));
  specdec::SpeculativeDecoder dec(trees, target, SpeculativeOptions{.max_tree_nodes = 5});
  return dec.generate(prompt, config).tokens;
}

}  // namespace

TEST_CASE("chi-square tail probabilities match the tables", "[decoder]") {
  // Critical values from standard chi-square tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.4).
  CHECK(chi_square_tail(18.307, 10) == Approx(0.05).epsilon(1e-3));
  CHECK(chi_square_tail(3.841, 1) == Approx(0.05).epsilon(1e-3));
  CHECK(chi_square_tail(29.588, 10) == Approx(0.001).epsilon(1e-3));
  CHECK(chi_square_tail(124.342, 100) == Approx(0.05).epsilon(1e-3));
  CHECK(chi_square_tail(149.449, 100) == Approx(0.001).epsilon(1e-3));
}

TEST_CASE("speculative sampling has the target's law (first 3 tokens, V = 4)", "[decoder]") {
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};  // repeats: the n-gram drafter finds matches

  struct Setting {
    const char* name;
    SamplingParams params;
  };
  const std::vector<Setting> settings{
      {"temperature 1", SamplingParams{}},
      {"temperature 0.6, top-k 3", SamplingParams{0.6f, 3, 1.0f, 0.0f}},
      {"temperature 1.3, top-p 0.7", SamplingParams{1.3f, 0, 0.7f, 0.0f}},
      {"min-p 0.3", SamplingParams{1.0f, 0, 1.0f, 0.3f}},
      // llama.cpp's chain: the filters on the logits, the temperature last.
      {"llama.cpp order: temperature 0.6, top-p 0.8, min-p 0.1",
       SamplingParams{0.6f, 0, 0.8f, 0.1f, true}},
  };
  for (const auto& setting : settings) {
    const auto law = exact_law(target_model, prompt, setting.params);

    SECTION(std::string("target-only sampling, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        MockLM target = target_model.lm();
        return specdec::AutoregressiveDecoder(target)
            .generate(prompt, sampling_config(setting.params, seed))
            .tokens;
      });
    }
    SECTION(std::string("suffix drafter, tree rounds of up to 6 nodes, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        return suffix_tree_tokens(target_model, prompt, sampling_config(setting.params, seed));
      });
    }
    SECTION(std::string("draft model trees of up to 5 nodes, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        return model_tree_tokens(target_model, draft_model, prompt,
                                 sampling_config(setting.params, seed));
      });
    }
    for (const std::size_t k : {1, 2, 3}) {
      SECTION(std::string("draft model, k = ") + std::to_string(k) + ", " + setting.name) {
        check_law(law, [&](std::uint64_t seed) {
          MockLM target = target_model.lm();
          MockLM draft = draft_model.lm();
          specdec::SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = k});
          return dec.generate(prompt, sampling_config(setting.params, seed)).tokens;
        });
      }
    }
  }
  const SamplingParams plain{};
  const auto law = exact_law(target_model, prompt, plain);
  SECTION("draft model trees cut by the cost model (a node costs 0.3 target steps)") {
    check_law(law, [&](std::uint64_t seed) {
      return model_tree_tokens(target_model, draft_model, prompt, sampling_config(plain, seed),
                               0.3);
    });
  }
  SECTION("draft model, adaptive k") {
    check_law(law, [&](std::uint64_t seed) {
      MockLM target = target_model.lm();
      MockLM draft = draft_model.lm();
      SpeculativeOptions options{.adaptive = true};
      options.adaptive_options.initial_k = 1;  // then k changes between the rounds
      options.adaptive_options.max_k = 3;
      specdec::SpeculativeDecoder dec(draft, target, options);
      return dec.generate(prompt, sampling_config(plain, seed)).tokens;
    });
  }
  SECTION("n-gram drafter (point-mass proposals)") {
    check_law(law, [&](std::uint64_t seed) {
      MockLM target = target_model.lm();
      specdec::NGramDrafter ngram;
      specdec::SpeculativeDecoder dec(ngram, target, SpeculativeOptions{.k = 3});
      return dec.generate(prompt, sampling_config(plain, seed)).tokens;
    });
  }
  SECTION("draft model near the target's context limit (k shrinks every round)") {
    check_law(law, [&](std::uint64_t seed) {
      MockLM target = target_model.lm(prompt.size() + kDepth);
      MockLM draft = draft_model.lm();
      specdec::SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 3});
      GenerationConfig cfg = sampling_config(plain, seed);
      cfg.max_new_tokens = 100;
      return dec.generate(prompt, cfg).tokens;
    });
  }
}

// Exactness alone does not pin down the verifier: accepting x ~ q with probability p(x) (the
// point-mass rule) is exact too, only worse. With the right q, the first drafted token is
// accepted with probability sum_x min(p(x), q(x)) (Leviathan et al., Theorem 3.5), and a
// point-mass proposal x with probability p(x). Binomial test over the seeds, |z| < 4.5 (two-sided
// significance 7e-6).
TEST_CASE("the first drafted token is accepted with probability sum min(p, q)", "[decoder]") {
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};
  const SamplingParams params{0.8f, 3, 1.0f, 0.0f};
  const auto p0 = specdec::sampling::process_logits<double>(target_model.logits(prompt), params);
  const auto q0 = specdec::sampling::process_logits<double>(draft_model.logits(prompt), params);

  auto check_rate = [&](double alpha, auto&& first_round_accepted) {
    std::uint64_t accepted = 0;
    for (std::uint64_t seed = 0; seed < kSeeds; ++seed) accepted += first_round_accepted(seed);
    const double n = static_cast<double>(kSeeds);
    const double z =
        (static_cast<double>(accepted) - n * alpha) / std::sqrt(n * alpha * (1 - alpha));
    INFO("accepted " << accepted << " of " << kSeeds << ", expected rate " << alpha
                     << ", z = " << z);
    CHECK(std::abs(z) < 4.5);
  };

  SECTION("draft model") {
    double alpha = 0;
    for (std::size_t x = 0; x < kVocab; ++x) alpha += std::min(p0[x], q0[x]);
    check_rate(alpha, [&](std::uint64_t seed) {
      MockLM target = target_model.lm();
      MockLM draft = draft_model.lm();
      specdec::SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 1});
      GenerationConfig cfg = sampling_config(params, seed);
      cfg.record_rounds = true;
      const auto r = dec.generate(prompt, cfg);
      REQUIRE(r.rounds.at(0).drafted.size() == 1);
      return r.rounds[0].accepted;
    });
  }
  SECTION("draft model tree: two candidates drawn without replacement") {
    // The first candidate x ~ q is accepted with probability min(1, p(x) / q(x)), as in a chain.
    // After its rejection the residual is w = max(0, p - q) / (1 - alpha) and the second
    // candidate y ~ q without x, r(y) = q(y) / (1 - q(x)), is accepted with probability
    // min(1, w(y) / r(y)); so P(a candidate is accepted) =
    //   alpha + sum_x q(x) (1 - min(1, p(x) / q(x))) sum_(y != x) min(r(y), w(y)).
    // A point-mass verifier (p(x)) or a remainder left unnormalised (r = q) gives other rates.
    double alpha = 0;
    for (std::size_t x = 0; x < kVocab; ++x) alpha += std::min(p0[x], q0[x]);
    double either = alpha;
    for (std::size_t x = 0; x < kVocab; ++x) {
      if (q0[x] == 0) continue;
      double second = 0;
      for (std::size_t y = 0; y < kVocab; ++y) {
        if (y == x) continue;
        const double r = q0[y] / (1 - q0[x]);
        const double w = std::max(0.0, p0[y] - q0[y]) / (1 - alpha);
        second += std::min(r, w);
      }
      either += q0[x] * (1 - std::min(1.0, p0[x] / q0[x])) * second;
    }
    const auto first_round = [&](std::uint64_t seed) {
      MockLM target = target_model.lm();
      MockLM draft = draft_model.lm();
      specdec::ModelTreeDrafter<MockLM> trees(draft, {.branch = 2, .expand = 1, .max_depth = 1});
      specdec::SpeculativeDecoder dec(trees, target, SpeculativeOptions{.max_tree_nodes = 2});
      GenerationConfig cfg = sampling_config(params, seed);
      cfg.record_rounds = true;
      const auto r = dec.generate(prompt, cfg);
      REQUIRE(r.rounds.at(0).tree_parents == std::vector<std::int32_t>{-1, -1});
      return r.rounds[0];
    };
    check_rate(alpha, [&](std::uint64_t seed) {
      const specdec::RoundRecord round = first_round(seed);
      return round.accepted == 1 && round.accepted_nodes.at(0) == 0;
    });
    check_rate(either, [&](std::uint64_t seed) { return first_round(seed).accepted == 1; });
  }
  SECTION("n-gram drafter") {
    // The suffix 0 1 occurred at the start, followed by 2: the proposal is 2.
    check_rate(p0[2], [&](std::uint64_t seed) {
      MockLM target = target_model.lm();
      specdec::NGramDrafter ngram;
      specdec::SpeculativeDecoder dec(ngram, target, SpeculativeOptions{.k = 1});
      GenerationConfig cfg = sampling_config(params, seed);
      cfg.record_rounds = true;
      const auto r = dec.generate(prompt, cfg);
      REQUIRE(r.rounds.at(0).drafted == std::vector<token_t>{2});
      return r.rounds[0].accepted;
    });
  }
}

// The mutation checks of the sampled draft trees: the plumbing between the drafter, the session
// and the verifier, done wrong in three ways, must fail the chi-square test above (the rules
// themselves have their mutation checks in tests/sampling/test_verify_tree.cpp). Each wrong law
// must be rejected at p < 1e-6 (the correct one passes at 1e-3 above, with the same seeds).
TEST_CASE("sampled draft trees: the law test sees wrong plumbing", "[decoder]") {
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};
  const SamplingParams params{};
  const auto law = exact_law(target_model, prompt, params);
  const auto rejected = [&](auto mutate) {
    std::uint64_t impossible = 0;
    const double p_value = law_p_value(
        law,
        [&](std::uint64_t seed) {
          return mutated_tree_tokens(target_model, draft_model, prompt,
                                     sampling_config(params, seed), mutate);
        },
        impossible);
    INFO("p = " << p_value << ", impossible continuations " << impossible);
    CHECK((p_value < 1e-6 || impossible > 0));
  };
  SECTION("every node verified against the root's row of q") {
    rejected([](specdec::DraftTree& tree) {
      for (std::int32_t& row : tree.q_rows)
        if (row >= 0) row = tree.q_rows[0];
    });
  }
  SECTION("draws without replacement verified as draws with replacement") {
    rejected([](specdec::DraftTree& tree) {
      tree.proposal = specdec::sampling::TreeProposal::sampled_with_replacement;
    });
  }
  SECTION("a later sibling kept only when its own draft probability is high") {
    // llama.cpp's --draft-p-split on the drawn token: the cut then depends on the draw.
    rejected([](specdec::DraftTree& tree) {
      remove_nodes(tree, [](const specdec::DraftTree& t, std::size_t i) {
        const std::int32_t parent = t.parents[i];
        const bool first_child =
            std::find(t.parents.begin(), t.parents.end(), parent) - t.parents.begin() ==
            static_cast<std::ptrdiff_t>(i);
        return !first_child && t.q_row(parent)[static_cast<std::size_t>(t.tokens[i])] < 0.3f;
      });
    });
  }
}

// A drafter's malformed sampled tree is refused with an error naming what is wrong, before any
// row of it is read: rows of the wrong width, missing row indices, a row index past q's rows.
TEST_CASE("sampled draft trees: a malformed tree gets a clear error", "[decoder]") {
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};
  const auto fails_with = [&](auto mutate, const std::string& message) {
    CHECK_THROWS_WITH(mutated_tree_tokens(target_model, draft_model, prompt,
                                          sampling_config(SamplingParams{}, 7), mutate),
                      Catch::Contains(message));
  };
  SECTION("rows of another vocabulary") {
    fails_with([](specdec::DraftTree& tree) { ++tree.vocab; },
               "sampled tree has rows of 5 probabilities");
  }
  SECTION("a row index missing") {
    fails_with([](specdec::DraftTree& tree) { tree.q_rows.pop_back(); }, "row indices for");
  }
  SECTION("the context's row missing") {
    fails_with([](specdec::DraftTree& tree) { tree.q_rows[0] = -1; },
               "no q row for the context (its first children), which has children");
  }
  SECTION("a row index past q's rows") {
    fails_with(
        [](specdec::DraftTree& tree) {
          tree.q_rows[0] = static_cast<std::int32_t>(tree.q.size() / tree.vocab);
        },
        "no q row for the context");
  }
  SECTION("no rows at all") {
    fails_with([](specdec::DraftTree& tree) { tree.q.clear(); }, "no q row for");
  }
}

// A draft whose output head is restricted to a subset of the vocabulary (cpu::Options::
// head_tokens) gives q = 0 outside the subset: every continuation through a token outside it can
// only come from the residual norm(max(0, p - q)). The law must still be the target's. Subsets:
// a prefix of the ids (the first-N head) and a list that is not a prefix, with k = 1 .. 3, several
// processings, and prompt lookup falling back to the restricted draft (LookupThenModelDrafter).
// Same chi-square test as above (significance 1e-3 per configuration).
TEST_CASE("a draft restricted to a vocabulary subset keeps the target's law", "[decoder]") {
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};
  auto restricted = [&](std::vector<bool> in_subset) {
    return MockLM(kVocab, 64, [&draft_model, in_subset](std::span<const token_t> prefix) {
      std::vector<float> row = draft_model.logits(prefix);
      for (std::size_t i = 0; i < kVocab; ++i)
        if (!in_subset[i]) row[i] = std::numeric_limits<float>::lowest();  // cpu::kMaskedLogit
      return row;
    });
  };
  struct Subset {
    const char* name;
    std::vector<bool> members;
  };
  const std::vector<Subset> subsets{{"first 2 ids", {true, true, false, false}},
                                    {"ids 1 and 3", {false, true, false, true}}};
  const std::vector<std::pair<const char*, SamplingParams>> settings{
      {"temperature 1", SamplingParams{}},
      {"temperature 0.6, top-k 3", SamplingParams{0.6f, 3, 1.0f, 0.0f}},
      {"min-p 0.3", SamplingParams{1.0f, 0, 1.0f, 0.3f}},
  };
  for (const auto& subset : subsets)
    for (const auto& [name, params] : settings) {
      const auto law = exact_law(target_model, prompt, params);
      for (const std::size_t k : {1, 2, 3}) {
        SECTION(std::string(subset.name) + ", k = " + std::to_string(k) + ", " + name) {
          check_law(law, [&](std::uint64_t seed) {
            MockLM target = target_model.lm();
            MockLM draft = restricted(subset.members);
            specdec::SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = k});
            return dec.generate(prompt, sampling_config(params, seed)).tokens;
          });
        }
      }
      SECTION(std::string(subset.name) + ", n-gram lookup then the draft, " + name) {
        check_law(law, [&](std::uint64_t seed) {
          MockLM target = target_model.lm();
          MockLM draft = restricted(subset.members);
          specdec::LookupThenModelDrafter<MockLM> drafter(draft, {.max_ngram = 2, .min_ngram = 2});
          specdec::SpeculativeDecoder dec(drafter, target, SpeculativeOptions{.k = 2});
          return dec.generate(prompt, sampling_config(params, seed)).tokens;
        });
      }
    }
}

// Penalties and logit bias are a function of the context: the speculative decoder adjusts every
// row, drafted positions included, for its own context, so its law is the penalised target's.
// The exact law of the penalised target is enumerated as above; chi-square test as above
// (significance 1e-3 per configuration). The window (last_n = 2) is shorter than a round, so
// drafted tokens push earlier ones out of it within the round.
TEST_CASE("speculative sampling with penalties and logit bias has the penalised target's law",
          "[decoder][penalties]") {
  namespace sp = specdec::sampling;
  const ToyModel target_model(11);
  const ToyModel draft_model(12);
  const std::vector<token_t> prompt{0, 1, 2, 0, 1};
  struct Setting {
    const char* name;
    SamplingParams params;
    sp::Penalties penalties;
  };
  const auto penalties = [](float repeat, int last_n, float frequency, float presence,
                            sp::PenaltyScope scope, std::vector<sp::LogitBias> bias) {
    sp::Penalties p;
    p.repeat = repeat;
    p.last_n = last_n;
    p.frequency = frequency;
    p.presence = presence;
    p.scope = scope;
    p.logit_bias = std::move(bias);
    return p;
  };
  const float ban = -std::numeric_limits<float>::infinity();
  const std::vector<Setting> settings{
      {"repeat 1.8, last 2, bias", SamplingParams{},
       penalties(1.8f, 2, 0.0f, 0.0f, sp::PenaltyScope::context, {{3, 0.8f}})},
      {"frequency 0.7, presence 0.5, whole context, temperature 0.7, top-k 3",
       SamplingParams{0.7f, 3, 1.0f, 0.0f},
       penalties(1.0f, -1, 0.7f, 0.5f, sp::PenaltyScope::context, {})},
      {"OpenAI-style: completion scope, presence 1.0, token 2 banned, llama.cpp order",
       SamplingParams{0.8f, 0, 0.9f, 0.05f, true},
       penalties(1.0f, -1, 0.0f, 1.0f, sp::PenaltyScope::completion, {{2, ban}})},
  };
  for (const auto& setting : settings) {
    const auto law = exact_law(target_model, prompt, setting.params, setting.penalties);
    const auto config = [&](std::uint64_t seed) {
      GenerationConfig cfg = sampling_config(setting.params, seed);
      cfg.penalties = setting.penalties;
      return cfg;
    };
    SECTION(std::string("target-only sampling, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        MockLM target = target_model.lm();
        return specdec::AutoregressiveDecoder(target).generate(prompt, config(seed)).tokens;
      });
    }
    for (const std::size_t k : {1, 3}) {
      SECTION(std::string("draft model, k = ") + std::to_string(k) + ", " + setting.name) {
        check_law(law, [&](std::uint64_t seed) {
          MockLM target = target_model.lm();
          MockLM draft = draft_model.lm();
          specdec::SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = k});
          return dec.generate(prompt, config(seed)).tokens;
        });
      }
    }
    SECTION(std::string("n-gram drafter, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        MockLM target = target_model.lm();
        specdec::NGramDrafter ngram;
        specdec::SpeculativeDecoder dec(ngram, target, SpeculativeOptions{.k = 3});
        return dec.generate(prompt, config(seed)).tokens;
      });
    }
    // Token trees: each node's row adjusted for its own path.
    SECTION(std::string("suffix drafter, tree rounds of up to 6 nodes, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        return suffix_tree_tokens(target_model, prompt, config(seed));
      });
    }
    SECTION(std::string("draft model trees of up to 5 nodes, ") + setting.name) {
      check_law(law, [&](std::uint64_t seed) {
        return model_tree_tokens(target_model, draft_model, prompt, config(seed));
      });
    }
  }
}
