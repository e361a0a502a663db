#pragma once
// Test doubles for the decoders: a CausalLM whose logits are a function of the tokens in its
// cache (so any bookkeeping mistake changes what it returns) and which records every call, and a
// tiny tokenizer whose tokens are fixed strings.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec::test {

/// A CausalLM with a fake KV cache: `cache` holds the tokens consumed so far, and the logits row
/// of a position is next_logits(cache up to and including that position). Every forward and
/// rollback is recorded in `calls`. Misuse (empty forward, context overflow, rollback beyond the
/// cache) throws, as a real backend does.
class MockLM {
 public:
  using LogitsFn = std::function<std::vector<float>(std::span<const token_t> prefix)>;

  struct Call {
    enum Kind { forward, rollback, tree, accept } kind;
    std::vector<token_t> tokens;  ///< forward: the tokens fed
    std::size_t n = 0;            ///< rollback: the positions kept
    std::size_t cached_before = 0;
    bool operator==(const Call&) const = default;
  };

  MockLM(std::size_t vocab, std::size_t context, LogitsFn next_logits)
      : vocab_(vocab), context_(context), next_logits_(std::move(next_logits)) {}

  [[nodiscard]] std::size_t vocab_size() const { return vocab_; }
  [[nodiscard]] std::size_t context_length() const { return context_; }
  [[nodiscard]] std::size_t cached() const { return cache.size(); }

  /// The logits row the model returns after consuming `prefix` (no state change).
  [[nodiscard]] std::vector<float> logits_of(std::span<const token_t> prefix) const {
    return next_logits_(prefix);
  }

  LogitsView forward(std::span<const token_t> tokens) {
    if (tokens.empty()) throw Error("MockLM: forward of no tokens");
    if (cache.size() + tokens.size() > context_)
      throw Error("MockLM: context overflow (" + std::to_string(cache.size()) + " + " +
                  std::to_string(tokens.size()) + " > " + std::to_string(context_) + ")");
    calls.push_back({Call::forward, {tokens.begin(), tokens.end()}, 0, cache.size()});
    tree_parents_.clear();
    tree_tokens_.clear();
    logits_.clear();
    for (const token_t t : tokens) {
      if (t < 0 || static_cast<std::size_t>(t) >= vocab_) throw Error("MockLM: token out of range");
      cache.push_back(t);
      const std::vector<float> row = next_logits_(cache);
      if (row.size() != vocab_) throw Error("MockLM: the logits function returned a bad row");
      logits_.insert(logits_.end(), row.begin(), row.end());
    }
    ++forwards;
    return LogitsView{logits_.data(), tokens.size(), vocab_, where};
  }

  void rollback(std::size_t n) {
    if (n > cache.size()) throw Error("MockLM: rollback beyond the cache");
    calls.push_back({Call::rollback, {}, n, cache.size()});
    cache.resize(n);
    tree_parents_.clear();
    tree_tokens_.clear();
  }

  /// A token tree (TreeCausalLM): row i = next_logits(cache ++ the path to node i); the cache
  /// does not move until accept_path().
  LogitsView forward_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents) {
    tree_tokens_.clear();
    tree_parents_.clear();
    return extend_tree(tokens, parents);
  }
  /// More nodes for the pending tree; parents index the whole tree.
  LogitsView extend_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents) {
    if (tokens.empty() || parents.size() != tokens.size()) throw Error("MockLM: bad tree");
    const std::size_t first = tree_tokens_.size();
    if (first + tokens.size() > max_tree_nodes) throw Error("MockLM: tree of too many nodes");
    if (cache.size() + first + tokens.size() > context_)
      throw Error("MockLM: tree past the context");
    calls.push_back({Call::tree, {tokens.begin(), tokens.end()}, 0, cache.size()});
    logits_.clear();
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (parents[i] < -1 || parents[i] >= static_cast<std::int64_t>(first + i))
        throw Error("MockLM: a parent after its child");
    tree_tokens_.insert(tree_tokens_.end(), tokens.begin(), tokens.end());
    tree_parents_.insert(tree_parents_.end(), parents.begin(), parents.end());
    for (std::size_t i = first; i < tree_tokens_.size(); ++i) {
      std::vector<token_t> path;
      for (std::int64_t a = static_cast<std::int64_t>(i); a >= 0;
           a = tree_parents_[static_cast<std::size_t>(a)])
        path.insert(path.begin(), tree_tokens_[static_cast<std::size_t>(a)]);
      std::vector<token_t> prefix = cache;
      prefix.insert(prefix.end(), path.begin(), path.end());
      const std::vector<float> row = next_logits_(prefix);
      logits_.insert(logits_.end(), row.begin(), row.end());
    }
    ++forwards;
    return LogitsView{logits_.data(), tokens.size(), vocab_, where};
  }
  void accept_path(std::span<const std::size_t> path) {
    if (tree_parents_.empty()) throw Error("MockLM: accept_path without a tree");
    std::vector<token_t> kept;
    for (std::size_t k = 0; k < path.size(); ++k) {
      const std::int64_t want = k == 0 ? -1 : static_cast<std::int64_t>(path[k - 1]);
      if (path[k] >= tree_parents_.size() || tree_parents_[path[k]] != want)
        throw Error("MockLM: accept_path of a path that is not a chain of the tree");
      kept.push_back(tree_tokens_[path[k]]);
    }
    calls.push_back({Call::accept, kept, path.size(), cache.size()});
    cache.insert(cache.end(), kept.begin(), kept.end());
    tree_parents_.clear();
    tree_tokens_.clear();
  }

  /// Nodes a tree holds at most (as cpu::Transformer::max_tree_nodes).
  static constexpr std::size_t max_tree_nodes = 256;
  std::vector<token_t> cache;  ///< tokens consumed (the fake KV cache)
  std::vector<Call> calls;
  std::size_t forwards = 0;
  Memory where = Memory::host;  ///< set to device to test the refusal

 private:
  std::size_t vocab_;
  std::size_t context_;
  LogitsFn next_logits_;
  std::vector<float> logits_;
  std::vector<token_t> tree_tokens_;        // the last forward_tree()'s
  std::vector<std::int32_t> tree_parents_;  // empty: none pending
};

static_assert(TreeCausalLM<MockLM>);

/// How Catch2 prints a call when a call log differs: "fwd[cached 2](3 4)" or "rb[cached 6](5)".
inline std::ostream& operator<<(std::ostream& os, const MockLM::Call& c) {
  if (c.kind == MockLM::Call::rollback)
    return os << "rb[cached " << c.cached_before << "](" << c.n << ")";
  os << (c.kind == MockLM::Call::tree     ? "tree"
         : c.kind == MockLM::Call::accept ? "accept"
                                          : "fwd")
     << "[cached " << c.cached_before << "](";
  for (std::size_t i = 0; i < c.tokens.size(); ++i) os << (i ? " " : "") << c.tokens[i];
  return os << ")";
}

inline MockLM::Call fwd(std::vector<token_t> tokens, std::size_t cached_before) {
  return {MockLM::Call::forward, std::move(tokens), 0, cached_before};
}
inline MockLM::Call rb(std::size_t n, std::size_t cached_before) {
  return {MockLM::Call::rollback, {}, n, cached_before};
}

/// Logits that make `next` the argmax (greedy scripts): 0 everywhere, 1 at `next`.
inline std::vector<float> one_hot_logits(std::size_t vocab, token_t next) {
  std::vector<float> row(vocab, 0.0f);
  row[static_cast<std::size_t>(next)] = 1.0f;
  return row;
}

/// Greedy script over `vocab` tokens: the next token is the last one + 1, except at the prefix
/// lengths in `wrong`, where it is the last one + 2 (a draft that disagrees with the target
/// there).
inline MockLM counting_model(std::size_t context, std::set<std::size_t> wrong = {},
                             std::size_t vocab = 32) {
  return MockLM(vocab, context, [wrong, vocab](std::span<const token_t> prefix) {
    const token_t step = wrong.count(prefix.size()) ? 2 : 1;
    return one_hot_logits(vocab, static_cast<token_t>((prefix.back() + step) % vocab));
  });
}

/// An order-2 Markov model over V = 6 with position dependence (random logits from `seed`).
struct Markov {
  std::vector<float> table;
  explicit Markov(std::uint32_t seed) : table(6 * 6 * 3 * 6) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (auto& x : table) x = dist(gen);
  }
  /// The model with room for `context` positions; its row at prefix length `bad_at` has a NaN
  /// (0: never).
  [[nodiscard]] MockLM lm(std::size_t context = 64, std::size_t bad_at = 0) const {
    return MockLM(6, context, [this, bad_at](std::span<const token_t> prefix) {
      const auto a = static_cast<std::size_t>(prefix.back());
      const auto b = prefix.size() > 1 ? static_cast<std::size_t>(prefix[prefix.size() - 2]) : 0;
      const std::size_t offset = ((a * 6 + b) * 3 + prefix.size() % 3) * 6;
      std::vector<float> row(table.begin() + static_cast<std::ptrdiff_t>(offset),
                             table.begin() + static_cast<std::ptrdiff_t>(offset + 6));
      if (prefix.size() == bad_at) row[1] = std::numeric_limits<float>::quiet_NaN();
      return row;
    });
  }
};

/// Greedy decoding of at most `max_new_tokens`, recording every round.
inline GenerationConfig greedy(std::size_t max_new_tokens) {
  GenerationConfig cfg;
  cfg.max_new_tokens = max_new_tokens;
  cfg.sampling.temperature = 0;
  cfg.record_rounds = true;
  return cfg;
}

/// A tokenizer whose token i is the string pieces[i]; no special tokens except an optional EOS
/// (which decodes to nothing).
class MockTokenizer final : public Tokenizer {
 public:
  explicit MockTokenizer(std::vector<std::string> pieces, token_t eos = -1)
      : pieces_(std::move(pieces)), eos_(eos) {}

  [[nodiscard]] std::vector<token_t> encode(std::string_view, bool) const override {
    throw Error("MockTokenizer: encode is not implemented");
  }
  [[nodiscard]] std::string token_bytes(token_t id) const override {
    return id == eos_ ? std::string() : pieces_.at(static_cast<std::size_t>(id));
  }
  [[nodiscard]] std::string_view token_piece(token_t id) const override {
    return pieces_.at(static_cast<std::size_t>(id));
  }
  void decode_step(DecodeState& state, token_t id, std::string& out) const override {
    out += token_bytes(id);
    state.at_start = false;
  }
  void decode_finish(DecodeState&, std::string&) const override {}
  [[nodiscard]] std::size_t vocab_size() const override { return pieces_.size(); }
  [[nodiscard]] token_t bos() const override { return -1; }
  [[nodiscard]] token_t eos() const override { return eos_; }
  [[nodiscard]] std::string summary() const override { return "mock"; }

 private:
  std::vector<std::string> pieces_;
  token_t eos_;
};

}  // namespace specdec::test
