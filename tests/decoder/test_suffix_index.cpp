// The suffix index against brute force over the indexed texts: every count, every longest match,
// the proposal tree's shape and scores, the memory bound, the drafter's rebuild on an edited
// sequence, and the shared index under concurrent additions and lookups.
#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "specdec/decoder/drafters.hpp"
#include "specdec_test.hpp"

using specdec::DraftTree;
using specdec::SuffixIndex;
using specdec::token_t;

namespace {

using Text = std::vector<token_t>;

/// Occurrences of `run` in the texts (windows never cross texts).
std::uint64_t brute_count(const std::vector<Text>& texts, const Text& run) {
  std::uint64_t n = 0;
  for (const Text& t : texts)
    for (std::size_t i = 0; i + run.size() <= t.size(); ++i)
      n += std::equal(run.begin(), run.end(), t.begin() + static_cast<std::ptrdiff_t>(i));
  return n;
}

/// What followed `run` in the texts, with counts (only runs + 1 token within max_depth).
std::map<token_t, std::uint64_t> brute_next(const std::vector<Text>& texts, const Text& run,
                                            std::size_t max_depth) {
  std::map<token_t, std::uint64_t> next;
  if (run.size() + 1 > max_depth) return next;
  for (const Text& t : texts)
    for (std::size_t i = 0; i + run.size() < t.size(); ++i)
      if (std::equal(run.begin(), run.end(), t.begin() + static_cast<std::ptrdiff_t>(i)))
        ++next[t[i + run.size()]];
  return next;
}

Text random_text(std::mt19937& rng, std::size_t n, token_t vocab) {
  std::uniform_int_distribution<token_t> d(0, vocab - 1);
  Text t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

}  // namespace

TEST_CASE("suffix index: counts, longest matches and continuations equal brute force", "[suffix]") {
  std::mt19937 rng(3);
  for (const std::size_t max_depth : {2, 5, 12}) {
    SuffixIndex index({.max_depth = max_depth});
    std::vector<Text> texts;
    for (int i = 0; i < 4; ++i) {
      texts.push_back(random_text(rng, 60, 4));  // a small vocabulary: many repeats
      index.add(texts.back());
    }
    INFO("max_depth " << max_depth);
    for (int trial = 0; trial < 300; ++trial) {
      const Text run = random_text(rng, 1 + static_cast<std::size_t>(trial) % max_depth, 4);
      REQUIRE(index.count(run) == brute_count(texts, run));
    }
    for (int trial = 0; trial < 100; ++trial) {
      const Text context = random_text(rng, 20, 4);
      for (const std::size_t min_match : {1, 2, 3})
        for (const std::size_t max_match : {std::size_t{4}, SuffixIndex::kNoLimit}) {
          const SuffixIndex::Match m = index.longest_match(context, min_match, max_match);
          // Brute force: the longest suffix (< max_depth, <= max_match) with a continuation.
          std::size_t want = 0;
          for (std::size_t len = std::min({context.size(), max_depth - 1, max_match});
               len >= min_match; --len) {
            const Text suffix(context.end() - static_cast<std::ptrdiff_t>(len), context.end());
            if (!brute_next(texts, suffix, max_depth).empty()) {
              want = len;
              break;
            }
          }
          REQUIRE(m.length == want);
        }
    }
  }
}

TEST_CASE("suffix index: the proposal is the best-first tree of empirical frequencies",
          "[suffix]") {
  std::mt19937 rng(11);
  SuffixIndex index({.max_depth = 10});
  std::vector<Text> texts{random_text(rng, 400, 5)};
  index.add(texts[0]);
  for (int trial = 0; trial < 50; ++trial) {
    const Text context = random_text(rng, 8, 5);
    const specdec::TreeShape shape{.max_nodes = 12, .min_score = 0.02f, .min_match = 2};
    const SuffixIndex::Match m = index.longest_match(context, shape.min_match, shape.max_match);
    const DraftTree tree = index.propose(context, shape);
    REQUIRE(tree.tokens.size() == tree.parents.size());
    REQUIRE(tree.scores.size() == tree.size());
    REQUIRE(tree.size() <= shape.max_nodes);
    if (m.length == 0) {
      REQUIRE(tree.empty());
      continue;
    }
    const Text matched(context.end() - static_cast<std::ptrdiff_t>(m.length), context.end());
    float lowest_taken = 2.0f;
    for (std::size_t i = 0; i < tree.size(); ++i) {
      REQUIRE(tree.parents[i] < static_cast<std::int32_t>(i));
      // The node's run: the match, then its path.
      Text path;
      for (std::int64_t a = static_cast<std::int64_t>(i); a >= 0;
           a = tree.parents[static_cast<std::size_t>(a)])
        path.insert(path.begin(), tree.tokens[static_cast<std::size_t>(a)]);
      Text parent_run = matched;
      parent_run.insert(parent_run.end(), path.begin(), path.end() - 1);
      const auto next = brute_next(texts, parent_run, 10);
      std::uint64_t total = 0;
      for (const auto& [t, c] : next) total += c;
      const float parent_score =
          tree.parents[i] < 0 ? 1.0f : tree.scores[static_cast<std::size_t>(tree.parents[i])];
      const float want =
          parent_score * static_cast<float>(static_cast<double>(next.at(path.back())) /
                                            static_cast<double>(total));
      REQUIRE(tree.scores[i] == want);
      REQUIRE(tree.scores[i] >= shape.min_score);
      REQUIRE(tree.scores[i] <= lowest_taken);  // best-first: scores never increase
      lowest_taken = tree.scores[i];
      // Siblings are distinct tokens.
      for (std::size_t j = 0; j < i; ++j)
        REQUIRE(!(tree.parents[j] == tree.parents[i] && tree.tokens[j] == tree.tokens[i]));
    }
  }
}

TEST_CASE("suffix index: memory stays within max_nodes", "[suffix]") {
  std::mt19937 rng(5);
  SuffixIndex index({.max_depth = 16, .max_nodes = 1000});
  index.add(random_text(rng, 5000, 1000));
  CHECK(index.nodes() == 1000);
  CHECK(index.full());
}

TEST_CASE(
    "suffix drafter: proposes what followed before, re-indexes an edited sequence, and "
    "prefers the shared index's longer match",
    "[suffix]") {
  specdec::SuffixDrafter drafter;
  const specdec::TreeShape shape{.max_nodes = 4, .min_score = 0.1f, .min_match = 2};
  Text seq{1, 2, 3, 4, 5, 9, 1, 2, 3};
  auto p = drafter.propose(seq, shape);
  REQUIRE(p.match_length == 3);  // "1 2 3" was followed by 4 5 9 ...
  REQUIRE(p.tree.tokens == Text{4, 5, 9, 1});
  REQUIRE(p.tree.parents == std::vector<std::int32_t>{-1, 0, 1, 2});
  // An edited sequence (not an extension) is indexed afresh: nothing repeats in it.
  seq = {7, 8, 6, 1, 2, 3};
  p = drafter.propose(seq, shape);
  CHECK(p.tree.empty());
  CHECK(drafter.local().count(Text{4}) == 0);

  specdec::SharedSuffixIndex shared;
  shared.add(Text{8, 6, 1, 2, 3, 42, 43});
  specdec::SuffixDrafter with_shared({}, &shared);
  p = with_shared.propose(seq, shape);
  CHECK(p.from_shared);
  CHECK(p.match_length == 5);
  CHECK(p.tree.tokens == Text{42, 43});
}

TEST_CASE("shared suffix index: concurrent additions and lookups, bounded by rebuilding",
          "[suffix]") {
  specdec::SharedSuffixIndex shared({.max_depth = 8, .max_nodes = 4000});
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < 4; ++w)
    threads.emplace_back([&shared, w] {
      std::mt19937 rng(w);
      for (int i = 0; i < 50; ++i) {
        const Text t = random_text(rng, 100, 50);
        if (w % 2 == 0)
          shared.add(t);
        else
          (void)shared.propose(t, {});
      }
    });
  for (auto& t : threads) t.join();
  CHECK(shared.nodes() < 4000);
  // The newest response is still there after rebuilds.
  const Text last{900, 901, 902, 903};
  shared.add(last);
  const auto p = shared.propose(Text{5, 900, 901}, {.min_match = 2});
  CHECK(p.tree.tokens == Text{902, 903});
}
