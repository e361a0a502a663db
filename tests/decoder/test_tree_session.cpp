// Tree rounds of SpeculativeSession (SpeculativeOptions::max_tree_nodes) over the mock model:
// greedy output equals target-only, the target sees one forward_tree and one accept_path per
// round (the cache always the sequence minus its last token), the round records hold the tree
// and the kept path, a token budget prunes the tree, penalties and logit bias are applied per
// node (greedy tokens and log-probabilities equal target-only), and the combinations that cannot
// work are refused by name; at temperature > 0 a draft model's tree holds candidates drawn from
// its processed distribution, with those rows. The law of sampled tree rounds:
// test_distribution.cpp.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec_test.hpp"

using specdec::SpeculativeOptions;
using specdec::token_t;
using specdec::test::greedy;
using specdec::test::Markov;
using specdec::test::MockLM;

namespace {

/// A prompt whose runs repeat with variations: the suffix index has branching continuations.
std::vector<token_t> repetitive_prompt() {
  std::vector<token_t> p;
  for (int r = 0; r < 6; ++r)
    for (token_t t : {0, 1, 2, static_cast<token_t>(3 + r % 3), 1, 2}) p.push_back(t % 6);
  return p;
}

}  // namespace

TEST_CASE(
    "tree rounds: greedy output equals target-only, with one forward_tree and one "
    "accept_path per round",
    "[decoder][tree]") {
  const Markov model(21);
  const std::vector<token_t> prompt = repetitive_prompt();
  MockLM baseline_target = model.lm(128);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(40)).tokens;
  REQUIRE(expected.size() == 40);

  for (const std::size_t nodes : {1, 3, 8, 16}) {
    INFO("trees of up to " << nodes << " nodes");
    MockLM target = model.lm(128);
    specdec::SuffixDrafter suffix({}, nullptr,
                                  {.max_nodes = nodes, .min_score = 0.0f, .min_match = 1});
    specdec::SpeculativeDecoder dec(suffix, target, SpeculativeOptions{.max_tree_nodes = nodes});
    const specdec::GenerationResult r = dec.generate(prompt, greedy(40));
    CHECK(r.tokens == expected);

    bool branched = false;
    std::size_t tree_rounds = 0, accepted = 0;
    for (const specdec::RoundRecord& round : r.rounds) {
      if (round.drafted.empty()) continue;
      ++tree_rounds;
      REQUIRE(round.tree_parents.size() == round.drafted.size());
      REQUIRE(round.drafted.size() <= nodes);
      REQUIRE(round.accepted_nodes.size() == round.accepted);
      // The kept nodes are a chain from the root, and their tokens were emitted.
      for (std::size_t j = 0; j < round.accepted_nodes.size(); ++j) {
        const std::int32_t want =
            j == 0 ? -1 : static_cast<std::int32_t>(round.accepted_nodes[j - 1]);
        REQUIRE(round.tree_parents[round.accepted_nodes[j]] == want);
      }
      for (std::size_t i = 0; i < round.tree_parents.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
          branched = branched || (round.tree_parents[i] == round.tree_parents[j]);
      accepted += round.accepted;
    }
    CHECK(tree_rounds > 0);
    CHECK(accepted > 0);
    if (nodes >= 8) CHECK(branched);
    // Every round: one tree forward (the first node the sequence's last token), then its path
    // kept; the cache holds the sequence minus its last token between rounds.
    std::size_t trees = 0, accepts = 0;
    for (const MockLM::Call& call : target.calls) {
      trees += call.kind == MockLM::Call::tree;
      accepts += call.kind == MockLM::Call::accept;
    }
    CHECK(trees == tree_rounds);
    CHECK(accepts == tree_rounds);
    std::vector<token_t> sequence = prompt;
    sequence.insert(sequence.end(), r.tokens.begin(), r.tokens.end());
    CHECK(target.cache.size() <= sequence.size());
    CHECK(std::equal(target.cache.begin(), target.cache.end(), sequence.begin()));
  }
}

TEST_CASE("tree rounds: the budget and the context prune the tree", "[decoder][tree]") {
  const Markov model(22);
  const std::vector<token_t> prompt = repetitive_prompt();
  for (const std::size_t budget : {1, 2, 3, 5}) {
    INFO("max_new_tokens " << budget);
    MockLM baseline_target = model.lm(128);
    const auto expected =
        specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(budget)).tokens;
    MockLM target = model.lm(128);
    specdec::SuffixDrafter suffix({}, nullptr,
                                  {.max_nodes = 16, .min_score = 0.0f, .min_match = 1});
    specdec::SpeculativeDecoder dec(suffix, target, SpeculativeOptions{.max_tree_nodes = 16});
    const specdec::GenerationResult r = dec.generate(prompt, greedy(budget));
    CHECK(r.tokens == expected);
    for (const specdec::RoundRecord& round : r.rounds) {
      // No node deeper than the tokens the round may still emit minus one.
      for (std::size_t i = 0; i < round.drafted.size(); ++i) {
        std::size_t depth = 1;
        for (std::int32_t a = round.tree_parents[i]; a >= 0;
             a = round.tree_parents[static_cast<std::size_t>(a)])
          ++depth;
        CHECK(depth <= budget - 1);
      }
    }
  }
  // A context with room for the prompt and 3 more tokens: trees shrink to fit, output the same.
  MockLM baseline_target = model.lm(prompt.size() + 3);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(10)).tokens;
  MockLM target = model.lm(prompt.size() + 3);
  specdec::SuffixDrafter suffix({}, nullptr, {.max_nodes = 16, .min_score = 0.0f, .min_match = 1});
  specdec::SpeculativeDecoder dec(suffix, target, SpeculativeOptions{.max_tree_nodes = 16});
  CHECK(dec.generate(prompt, greedy(10)).tokens == expected);
}

TEST_CASE(
    "tree rounds with penalties and logit bias: greedy tokens and log-probabilities equal "
    "target-only",
    "[decoder][tree][penalties]") {
  // Each node's row is adjusted for its own path (the round's history, then the path's tokens):
  // a node with the wrong context would pick another argmax or report another log-probability.
  const Markov model(25);
  const std::vector<token_t> prompt = repetitive_prompt();
  specdec::GenerationConfig cfg = greedy(30);
  cfg.penalties.repeat = 1.6f;
  cfg.penalties.last_n = 6;
  cfg.penalties.presence = 0.4f;
  cfg.penalties.logit_bias = {{2, -0.3f}};
  cfg.logprobs = true;
  cfg.top_logprobs = 2;
  for (const auto scope :
       {specdec::sampling::PenaltyScope::context, specdec::sampling::PenaltyScope::completion}) {
    INFO(
        "scope " << (scope == specdec::sampling::PenaltyScope::context ? "context" : "completion"));
    cfg.penalties.scope = scope;
    MockLM baseline_target = model.lm(128);
    const specdec::GenerationResult expected =
        specdec::AutoregressiveDecoder(baseline_target).generate(prompt, cfg);
    MockLM unpenalised_target = model.lm(128);
    specdec::GenerationConfig plain = cfg;
    plain.penalties = {};
    REQUIRE(specdec::AutoregressiveDecoder(unpenalised_target).generate(prompt, plain).tokens !=
            expected.tokens);  // the penalties change the output
    for (const std::size_t nodes : {3, 12}) {
      INFO("trees of up to " << nodes << " nodes");
      MockLM target = model.lm(128);
      specdec::SuffixDrafter suffix({}, nullptr,
                                    {.max_nodes = nodes, .min_score = 0.0f, .min_match = 1});
      specdec::SpeculativeDecoder dec(suffix, target, SpeculativeOptions{.max_tree_nodes = nodes});
      const specdec::GenerationResult r = dec.generate(prompt, cfg);
      CHECK(r.tokens == expected.tokens);
      CHECK(r.logprobs == expected.logprobs);
      CHECK(r.stats.accepted > 0);
      // A second turn: the completion scope starts again, the context scope goes on.
      const std::vector<token_t> turn = {1, 2, 0};
      MockLM baseline_again = model.lm(128);
      specdec::AutoregressiveDecoder again(baseline_again);
      (void)again.generate(prompt, cfg);
      CHECK(dec.continue_with(turn, cfg).tokens == again.continue_with(turn, cfg).tokens);
    }
  }
}

TEST_CASE("tree rounds: what cannot work is refused by name", "[decoder][tree]") {
  const Markov model(23);
  MockLM target = model.lm();
  specdec::NGramDrafter ngram;
  CHECK_THROWS_WITH(
      specdec::SpeculativeDecoder(ngram, target, SpeculativeOptions{.max_tree_nodes = 4}),
      Catch::Matchers::Contains("need a drafter that proposes trees"));
  specdec::SuffixDrafter suffix;
  CHECK_THROWS_WITH(specdec::SpeculativeDecoder(
                        suffix, target, SpeculativeOptions{.adaptive = true, .max_tree_nodes = 4}),
                    Catch::Matchers::Contains("adaptive draft length applies to chains"));
  // Chains with the same drafter (its best path) need no tree support from the target.
  MockLM baseline_target = model.lm();
  const std::vector<token_t> prompt = repetitive_prompt();
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(20)).tokens;
  specdec::SpeculativeDecoder chains(suffix, target, SpeculativeOptions{.k = 4});
  CHECK(chains.generate(prompt, greedy(20)).tokens == expected);
}

TEST_CASE("tree rounds: the cost model keeps the nodes that pay for themselves",
          "[decoder][tree]") {
  const Markov model(24);
  const std::vector<token_t> prompt = repetitive_prompt();
  MockLM baseline_target = model.lm(128);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(30)).tokens;
  const specdec::TreeShape shape{.max_nodes = 8, .min_score = 0.0f, .min_match = 1};
  const auto run = [&](const SpeculativeOptions& options) {
    MockLM target = model.lm(128);
    specdec::SuffixDrafter suffix({}, nullptr, shape);
    specdec::SpeculativeDecoder dec(suffix, target, options);
    const specdec::GenerationResult r = dec.generate(prompt, greedy(30));
    CHECK(r.tokens == expected);
    std::size_t most = 0;
    for (const auto& round : r.rounds) most = std::max(most, round.drafted.size());
    return most;
  };
  // (Named options, not temporaries in the calls: GCC 12 at -O3 reports a false
  // maybe-uninitialized for the temporaries' vectors.)
  SpeculativeOptions options;
  options.max_tree_nodes = 8;
  // Free nodes: every node the drafter proposes is verified (trees of 8).
  options.tree_cost.assign(9, 1.0);
  CHECK(run(options) == 8);
  // Nodes that cost a whole step each can never pay (a score is at most 1): no tree at all.
  for (std::size_t n = 0; n < options.tree_cost.size(); ++n)
    options.tree_cost[n] = 1.0 + 1.01 * static_cast<double>(n);
  CHECK(run(options) == 0);
  options.tree_cost = {1.0, 0.0};
  CHECK_THROWS_WITH(run(options), Catch::Matchers::Contains("must be a positive cost"));
}

TEST_CASE(
    "draft model trees: greedy output equals target-only, the trees branch and are kept "
    "in part",
    "[decoder][tree]") {
  const Markov target_model(31);
  const std::vector<token_t> prompt{1, 2, 3, 4, 5};
  MockLM baseline_target = target_model.lm(128);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(40)).tokens;
  // The draft: the target itself (its top token is the target's greedy one) and another model.
  for (const std::uint32_t draft_seed : {31u, 32u}) {
    const Markov draft_model(draft_seed);
    for (const std::size_t nodes : {1, 4, 12}) {
      INFO("draft seed " << draft_seed << ", trees of up to " << nodes);
      MockLM target = target_model.lm(128);
      MockLM draft = draft_model.lm(128);
      specdec::ModelTreeDrafter<MockLM> trees(draft, {.branch = 2, .expand = 3, .max_depth = 4});
      SpeculativeOptions options;
      options.max_tree_nodes = nodes;
      options.tree_cost.assign(nodes + 1, 1.0);  // free nodes: every proposed node verified
      specdec::SpeculativeDecoder dec(trees, target, options);
      const specdec::GenerationResult r = dec.generate(prompt, greedy(40));
      CHECK(r.tokens == expected);
      bool branched = false;
      for (const auto& round : r.rounds) {
        REQUIRE(round.drafted.size() <= nodes);
        for (std::size_t i = 0; i < round.tree_parents.size(); ++i)
          for (std::size_t j = 0; j < i; ++j)
            branched = branched || round.tree_parents[i] == round.tree_parents[j];
      }
      if (nodes >= 4) CHECK(branched);
      if (draft_seed == 31) CHECK(r.stats.accepted > 0);
      // The draft's cache never runs past the sequence.
      std::vector<token_t> sequence = prompt;
      sequence.insert(sequence.end(), r.tokens.begin(), r.tokens.end());
      CHECK(draft.cache.size() <= sequence.size());
      CHECK(std::equal(draft.cache.begin(), draft.cache.end(), sequence.begin()));
      // Each level scores only the nodes it expands (extend_tree), and the next round keeps the
      // accepted path's K/V in the draft instead of feeding those tokens again.
      std::size_t kept = 0;
      for (const MockLM::Call& call : draft.calls) {
        if (call.kind == MockLM::Call::tree) CHECK(call.tokens.size() <= 3);
        if (call.kind == MockLM::Call::accept) kept += call.tokens.size();
      }
      if (draft_seed == 31 && nodes >= 4) CHECK(kept > 0);
    }
  }
}

TEST_CASE(
    "suffix then draft model trees: greedy output equals target-only, and each round is the "
    "suffix tree when it expects a token, else the model's",
    "[decoder][tree][suffix]") {
  const Markov target_model(21);
  const std::vector<token_t> prompt = repetitive_prompt();
  MockLM baseline_target = target_model.lm(160);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(40)).tokens;
  for (const std::uint32_t draft_seed : {21u, 22u}) {
    INFO("draft seed " << draft_seed);
    MockLM target = target_model.lm(160);
    const Markov draft_model(draft_seed);  // lm() refers to it: it must outlive the MockLM
    MockLM draft = draft_model.lm(160);
    specdec::SuffixThenModelDrafter<MockLM> drafter(
        draft, specdec::SuffixDrafter({}, nullptr, {.max_nodes = 8, .min_score = 0.05f}),
        {.branch = 2, .expand = 2, .max_depth = 3});
    SpeculativeOptions options;
    options.max_tree_nodes = 8;
    specdec::SpeculativeDecoder dec(drafter, target, options);
    const specdec::GenerationResult r = dec.generate(prompt, greedy(40));
    CHECK(r.tokens == expected);
    // Both drafters had rounds: the suffix's and the model's (which extend the draft's tree).
    std::size_t tree_rounds = 0, draft_trees = 0;
    for (const specdec::RoundRecord& round : r.rounds) tree_rounds += round.drafted.empty() ? 0 : 1;
    for (const MockLM::Call& call : draft.calls) draft_trees += call.kind == MockLM::Call::tree;
    CHECK(drafter.suffix_rounds() > 0);
    CHECK(drafter.suffix_rounds() < tree_rounds);
    CHECK(draft_trees > 0);
    // The draft's cache never runs past the sequence, whoever drafted.
    std::vector<token_t> sequence = prompt;
    sequence.insert(sequence.end(), r.tokens.begin(), r.tokens.end());
    CHECK(std::equal(draft.cache.begin(), draft.cache.end(), sequence.begin()));
  }
}

TEST_CASE("draft model trees stay within the tree a model holds (max_tree_nodes)",
          "[decoder][tree]") {
  // Wide and deep: 16 nodes expanded per level for 64 levels would be 1008 draft nodes, past the
  // 256 a tree of MockLM (as of the CPU backend) holds; the drafter stops expanding there.
  const Markov model(31);
  const std::vector<token_t> prompt{1, 2, 3, 4, 5};
  MockLM baseline_target = model.lm(2048);
  const auto expected =
      specdec::AutoregressiveDecoder(baseline_target).generate(prompt, greedy(30)).tokens;
  MockLM target = model.lm(2048);
  const Markov draft_model(32);
  MockLM draft = draft_model.lm(2048);
  specdec::ModelTreeDrafter<MockLM> trees(
      draft, {.branch = 6, .expand = 16, .max_depth = 64, .min_score = 0.0f});
  SpeculativeOptions options;
  options.max_tree_nodes = 255;
  specdec::SpeculativeDecoder dec(trees, target, options);
  CHECK(dec.generate(prompt, greedy(30)).tokens == expected);
}

TEST_CASE(
    "draft model trees at temperature > 0: distinct drawn candidates, each parent's processed "
    "row of q, scores from q's ranked probabilities",
    "[decoder][tree]") {
  const Markov draft_model(32);
  MockLM draft = draft_model.lm(128);
  const std::vector<token_t> prompt{1, 2, 3, 4, 5};
  const specdec::sampling::SamplingParams params{0.8f, 0, 0.95f, 0.0f};
  std::size_t sampled_second = 0;  // trees whose root's second candidate is not q's second best
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    INFO("seed " << seed);
    specdec::ModelTreeDrafter<MockLM> trees(
        draft, {.branch = 3, .expand = 2, .max_depth = 3, .min_score = 0.0f});
    specdec::HostSampler sampler(draft.vocab_size(), 4);
    sampler.begin(params, seed);
    sampler.begin_round(prompt.back());
    trees.start(prompt);
    const specdec::DraftTree& tree = trees.draft_tree(prompt, 12, sampler);
    REQUIRE(tree.proposal == specdec::sampling::TreeProposal::sampled_without_replacement);
    REQUIRE(tree.vocab == draft.vocab_size());
    REQUIRE(tree.q_rows.size() == tree.size() + 1);
    REQUIRE(tree.size() == 12);
    std::vector<std::vector<token_t>> paths(tree.size());  // each node's path, node last
    for (std::size_t i = 0; i < tree.size(); ++i) {
      const std::int32_t parent = tree.parents[i];
      std::vector<token_t> before =
          parent < 0 ? std::vector<token_t>{} : paths[static_cast<std::size_t>(parent)];
      paths[i] = before;
      paths[i].push_back(tree.tokens[i]);
      // The parent's row is the draft's processed row after the path to it, bit for bit.
      std::vector<token_t> prefix = prompt;
      prefix.insert(prefix.end(), before.begin(), before.end());
      const std::vector<float> q =
          specdec::sampling::process_logits<float>(draft.logits_of(prefix), params);
      const std::span<const float> row = tree.q_row(parent);
      REQUIRE(row.size() == q.size());
      CHECK(std::equal(row.begin(), row.end(), q.begin()));
      CHECK(q[static_cast<std::size_t>(tree.tokens[i])] > 0);
      // The c-th child (in drawing order) has the c-th largest probability as its factor, and
      // siblings are distinct.
      std::size_t c = 0;
      for (std::size_t j = 0; j < i; ++j) {
        if (tree.parents[j] != parent) continue;
        CHECK(tree.tokens[j] != tree.tokens[i]);
        ++c;
      }
      std::vector<float> sorted = q;
      std::sort(sorted.begin(), sorted.end(), std::greater<>());
      const float parent_score = parent < 0 ? 1.0f : tree.scores[static_cast<std::size_t>(parent)];
      CHECK(tree.scores[i] == parent_score * sorted[c]);
      if (parent < 0 && c == 1 &&
          tree.tokens[i] != static_cast<token_t>(
                                std::distance(q.begin(), std::find(q.begin(), q.end(), sorted[1]))))
        ++sampled_second;
      if (i > 0) CHECK(tree.scores[i] <= tree.scores[i - 1]);  // best-first
    }
  }
  CHECK(sampled_second > 0);  // drawn, not chosen: the second candidate varies
  // Greedy decoding, or no sampler: the most likely tokens, point masses, no rows.
  specdec::ModelTreeDrafter<MockLM> trees(draft, {.branch = 3, .expand = 2, .max_depth = 3});
  specdec::HostSampler sampler(draft.vocab_size(), 4);
  sampler.begin(specdec::sampling::SamplingParams{0.0f}, 0);
  sampler.begin_round(prompt.back());
  trees.start(prompt);
  CHECK(trees.draft_tree(prompt, 12, sampler).proposal ==
        specdec::sampling::TreeProposal::point_mass);
  CHECK(trees.draft_tree(prompt, 12, sampler).q.empty());
  CHECK(trees.draft_tree(prompt, 12).proposal == specdec::sampling::TreeProposal::point_mass);
}
