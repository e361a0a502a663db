#pragma once
// Suffix decoding's index: which tokens followed a given run of tokens, and how often, in the
// prompt, the output so far and (in a server) earlier responses. A model-free drafter proposes
// the most frequent continuations of the sequence's longest indexed suffix as a token tree
// (tree speculation verifies all of its branches in one target forward).
//
// The index is a trie of every window of at most max_depth tokens of the indexed text: the node
// of a token run s counts the places s occurs (as a window start), so the children of s's node
// count what followed s. Indexing one token appends it to the windows ending just before it:
// O(max_depth) per token. Lookup walks the last m tokens of the context from the root, for m
// from the longest that can match down to min_match: O(max_depth^2) per round, microseconds.
//
// Memory is bounded by Options::max_nodes: when the trie is full, new windows stop growing it
// (the counts of existing nodes still grow), so a long conversation degrades to the prefix the
// trie holds, it never grows without bound. SharedSuffixIndex wraps one for a server's earlier
// responses: lookups under a shared lock, additions under an exclusive one, and when full it is
// rebuilt from the newest responses.
//
// This is the idea of Snowflake's SuffixDecoding (Oliaro et al., 2024), written for specdec's
// exact verification: the proposals are point masses, which the tree verifier accepts with
// probability p(x) and whose residual is p without x (sampling/tree_verify.hpp).
//
// DraftTree, the proposal type of every tree drafter, is defined here too: the suffix index's
// trees are point masses; a draft model's trees at temperature > 0 are sampled candidates and
// carry the draft's distributions with them (ModelTreeDrafter, decoder/drafters.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/sampling/tree_verify.hpp"

namespace specdec {

/// A proposed token tree: node i is tokens[i], its parent parents[i] (-1: it directly follows the
/// context), parents[i] < i; score[i] is the estimated probability that the path to node i is
/// the continuation (the product of the empirical frequencies along it). The children of a node
/// are in the order they were proposed, which is the order the verifier tries them.
///
/// How the children were proposed (`proposal`): point masses (deterministic continuations: the
/// suffix index, a draft model's most likely tokens), or drawn from a distribution without
/// replacement (a draft model sampling at temperature > 0). A sampled tree carries those
/// distributions, rows of `vocab` floats in `q`:
///   q_rows  [1 + size()]  q_rows[0]: the row the context's children were drawn from;
///                         q_rows[i + 1]: node i's children's row; -1 where there are no children;
///   q       [rows][vocab] the rows, in the drafter's order.
struct DraftTree {
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<float> scores;
  sampling::TreeProposal proposal = sampling::TreeProposal::point_mass;
  std::vector<std::int32_t> q_rows;
  std::vector<float> q;
  std::size_t vocab = 0;

  [[nodiscard]] std::size_t size() const noexcept { return tokens.size(); }
  [[nodiscard]] bool empty() const noexcept { return tokens.empty(); }
  [[nodiscard]] bool sampled() const noexcept {
    return proposal != sampling::TreeProposal::point_mass;
  }
  /// The row node i's children were drawn from (i = -1: the context's), or empty (also for a
  /// row index past q's rows: a drafter's bad tree is an error of the session, not a bad read).
  [[nodiscard]] std::span<const float> q_row(std::int32_t node) const {
    if (node < -1 || vocab == 0) return {};
    const std::size_t at = node < 0 ? 0 : static_cast<std::size_t>(node) + 1;
    if (at >= q_rows.size() || q_rows[at] < 0) return {};
    const auto row = static_cast<std::size_t>(q_rows[at]);
    if (row >= q.size() / vocab) return {};
    return std::span<const float>(q).subspan(row * vocab, vocab);
  }
  /// An empty point-mass tree that keeps its storage (q's rows are large).
  void clear() noexcept {
    tokens.clear();
    parents.clear();
    scores.clear();
    proposal = sampling::TreeProposal::point_mass;
    q_rows.clear();
    q.clear();
    vocab = 0;
  }
};

/// How a proposal is shaped: at most max_nodes nodes, each with a score of at least min_score,
/// chosen best-first by score from the longest match of min_match .. max_match tokens. The match
/// and its continuation share the index's window (max_depth tokens): a longer match leaves a
/// shallower tree, so the match is capped (a match of 23 tokens in a window of 24 would leave one
/// token to propose).
struct TreeShape {
  std::size_t max_nodes = 16;
  float min_score = 0.1f;
  std::size_t min_match = 2;
  std::size_t max_match = 8;
};

class SuffixIndex {
 public:
  /// longest_match() without an upper bound on the match.
  static constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

  struct Options {
    std::size_t max_depth = 24;       ///< longest window indexed (match + continuation)
    std::size_t max_nodes = 1 << 20;  ///< trie nodes at most (about 64 bytes each, map included)
  };

  SuffixIndex() : SuffixIndex(Options{}) {}
  explicit SuffixIndex(const Options& options) : options_(options) {
    if (options_.max_depth < 2) throw Error("SuffixIndex: max_depth must be at least 2");
    nodes_.push_back(Node{});  // the root: the empty run
  }

  /// Where the next appended token of one text goes: the nodes of the windows that end at its
  /// last token (the longest first). A text is indexed through its own cursor; windows never
  /// cross from one text into another.
  struct Cursor {
    std::vector<std::uint32_t> open;
  };

  /// Indexes `token` as the next token of the text behind `cursor`.
  void append(Cursor& cursor, token_t token) {
    // Each open window that still has room grows by the token, and a new window starts with it.
    std::vector<std::uint32_t> next;
    next.reserve(std::min(cursor.open.size() + 1, options_.max_depth));
    for (const std::uint32_t at : cursor.open) {
      if (nodes_[at].depth + 1 > options_.max_depth) continue;
      if (const std::uint32_t child = step(at, token); child != kNone) next.push_back(child);
    }
    if (const std::uint32_t child = step(0, token); child != kNone) next.push_back(child);
    cursor.open = std::move(next);
  }
  /// Indexes a whole text (a finished response, a prompt).
  void add(std::span<const token_t> text) {
    Cursor cursor;
    for (const token_t t : text) append(cursor, t);
  }

  /// The longest suffix of `context` (at most max_match and max_depth - 1 tokens, at least
  /// min_match) that the index holds with a continuation: its node and length; length 0 when
  /// there is none.
  struct Match {
    std::uint32_t node = 0;
    std::size_t length = 0;
  };
  [[nodiscard]] Match longest_match(std::span<const token_t> context, std::size_t min_match,
                                    std::size_t max_match = kNoLimit) const {
    const std::size_t longest = std::min({context.size(), options_.max_depth - 1, max_match});
    for (std::size_t m = longest; m >= std::max<std::size_t>(min_match, 1); --m) {
      std::uint32_t at = 0;
      for (std::size_t i = context.size() - m; i < context.size() && at != kNone; ++i)
        at = find(at, context[i]);
      if (at != kNone && nodes_[at].first_child != kNone) return {at, m};
    }
    return {};
  }

  /// The most frequent continuations of `context`'s longest match, as a tree (empty when there
  /// is no match of min_match tokens). Best-first: the node of highest score next, where a
  /// child's score is its parent's times count(child) / (sum of the counts of its siblings);
  /// ties go to the earlier-indexed child. Deterministic.
  [[nodiscard]] DraftTree propose(std::span<const token_t> context, const TreeShape& shape) const {
    return propose_from(longest_match(context, shape.min_match, shape.max_match), shape);
  }
  [[nodiscard]] DraftTree propose_from(const Match& match, const TreeShape& shape) const {
    DraftTree tree;
    if (match.length == 0 || shape.max_nodes == 0) return tree;
    struct Candidate {
      float score;
      std::uint64_t order;  // insertion order: the earlier first among equal scores
      std::uint32_t node;
      std::int32_t parent;  // tree index of the parent, -1 for the match's children
      bool operator<(const Candidate& o) const {
        return score != o.score ? score < o.score : order > o.order;
      }
    };
    std::priority_queue<Candidate> frontier;
    std::uint64_t order = 0;
    const auto push_children = [&](std::uint32_t node, float score, std::int32_t parent) {
      std::uint64_t total = 0;
      for (std::uint32_t c = nodes_[node].first_child; c != kNone; c = nodes_[c].next_sibling)
        total += nodes_[c].count;
      for (std::uint32_t c = nodes_[node].first_child; c != kNone; c = nodes_[c].next_sibling) {
        const float s = score * static_cast<float>(static_cast<double>(nodes_[c].count) /
                                                   static_cast<double>(total));
        if (s >= shape.min_score) frontier.push({s, order++, c, parent});
      }
    };
    push_children(match.node, 1.0f, -1);
    while (!frontier.empty() && tree.size() < shape.max_nodes) {
      const Candidate best = frontier.top();
      frontier.pop();
      tree.tokens.push_back(nodes_[best.node].token);
      tree.parents.push_back(best.parent);
      tree.scores.push_back(best.score);
      push_children(best.node, best.score, static_cast<std::int32_t>(tree.size() - 1));
    }
    return tree;
  }

  /// How often `run` occurs in the indexed texts (as a window of at most max_depth tokens).
  [[nodiscard]] std::uint64_t count(std::span<const token_t> run) const {
    std::uint32_t at = 0;
    for (const token_t t : run)
      if ((at = find(at, t)) == kNone) return 0;
    return run.empty() ? 0 : nodes_[at].count;
  }

  [[nodiscard]] std::size_t nodes() const noexcept { return nodes_.size(); }
  [[nodiscard]] bool full() const noexcept { return nodes_.size() >= options_.max_nodes; }
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  struct Node {
    token_t token = -1;
    std::uint32_t depth = 0;
    std::uint64_t count = 0;
    std::uint32_t first_child = kNone, next_sibling = kNone;
  };

  static std::uint64_t key(std::uint32_t node, token_t token) {
    return (static_cast<std::uint64_t>(node) << 32) | static_cast<std::uint32_t>(token);
  }
  [[nodiscard]] std::uint32_t find(std::uint32_t node, token_t token) const {
    const auto it = children_.find(key(node, token));
    return it == children_.end() ? kNone : it->second;
  }
  /// The child of `node` for `token`, counted once more; created when absent and the trie has
  /// room (else kNone).
  std::uint32_t step(std::uint32_t node, token_t token) {
    std::uint32_t child = find(node, token);
    if (child == kNone) {
      if (full()) return kNone;
      child = static_cast<std::uint32_t>(nodes_.size());
      Node n;
      n.token = token;
      n.depth = nodes_[node].depth + 1;
      n.next_sibling = nodes_[node].first_child;
      nodes_.push_back(n);
      nodes_[node].first_child = child;
      children_.emplace(key(node, token), child);
    }
    ++nodes_[child].count;
    return child;
  }

  Options options_;
  std::vector<Node> nodes_;
  std::unordered_map<std::uint64_t, std::uint32_t> children_;  // (node, token) -> child
};

/// A SuffixIndex that several sequences share (a server's earlier responses): safe under
/// concurrent lookups and additions. When an addition finds it full, it is rebuilt from the newest
/// responses that fill half of it.
class SharedSuffixIndex {
 public:
  explicit SharedSuffixIndex(const SuffixIndex::Options& options = {}) : index_(options) {}

  void add(std::span<const token_t> response) {
    const std::unique_lock lock(mutex_);
    recent_.emplace_back(response.begin(), response.end());
    index_.add(response);
    if (!index_.full()) return;
    // Rebuild from the newest responses while they fill at most half the nodes.
    SuffixIndex rebuilt(index_.options());
    std::size_t keep = 0;
    for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
      rebuilt.add(*it);
      ++keep;
      if (rebuilt.nodes() * 2 >= index_.options().max_nodes) break;
    }
    recent_.erase(recent_.begin(),
                  recent_.end() - static_cast<std::ptrdiff_t>(std::min(keep, recent_.size())));
    index_ = std::move(rebuilt);
  }

  /// propose() and its match length under a shared lock.
  struct Lookup {
    DraftTree tree;
    std::size_t match_length = 0;
  };
  [[nodiscard]] Lookup propose(std::span<const token_t> context, const TreeShape& shape) const {
    const std::shared_lock lock(mutex_);
    const SuffixIndex::Match m = index_.longest_match(context, shape.min_match, shape.max_match);
    return {index_.propose_from(m, shape), m.length};
  }

  [[nodiscard]] std::size_t nodes() const {
    const std::shared_lock lock(mutex_);
    return index_.nodes();
  }

 private:
  mutable std::shared_mutex mutex_;
  SuffixIndex index_;
  std::deque<std::vector<token_t>> recent_;
};

}  // namespace specdec
