#pragma once
// Drafters: what proposes the k tokens that the target verifies.
//
//  - ModelDrafter<M> wraps any CausalLM (a small draft model). It feeds the model and lets the
//    sequence's RoundSampler draw each drafted token from the model's logits (the sampler keeps
//    the rows of q for verification, on the host or on the device).
//  - NGramDrafter is model-free prompt lookup: it proposes the continuation of the longest recent
//    n-gram match in the sequence. Its proposals are deterministic, i.e. q is a point mass at each
//    drafted token, which the verifier handles exactly.
//  - LookupThenModelDrafter<M> tries prompt lookup first and falls back to a draft model when
//    the lookup finds nothing: free drafts where the output copies the input, the model elsewhere.
//  - SuffixDrafter is model-free suffix decoding: an index (decoder/suffix_index.hpp) of the
//    sequence and optionally of earlier responses proposes the most frequent continuations of
//    the longest matching suffix, as a token tree (draft_tree) or its best path (draft).
//  - NoDrafter proposes nothing: every round is one plain target step (AutoregressiveDecoder).
//  - AdaptiveDraftLength chooses k for the next round from the running acceptance and the
//    measured cost of a round of each length (decoder/cost_model.hpp measures it).
//
// The Drafter concept below is what a SpeculativeSession talks to. The sequence passed to start(),
// extend() and draft() is always the session's whole sequence (prompt + generated), and the
// drafter keeps whatever state it wants as a prefix of it; keep(n) says that only the first n
// tokens are still valid (the rest was rejected).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/sampler.hpp"
#include "specdec/decoder/suffix_index.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec {

/// What a drafter did in one round: `count` tokens handed to the sampler (count <= the k asked
/// for; 0 is allowed and makes the round a plain target step), how, and at what cost.
struct DraftResult {
  std::size_t count = 0;
  Proposal proposal = Proposal::point_mass;
  std::size_t forward_passes = 0;  ///< draft model forward calls made for this proposal
};

/// A source of drafted tokens.
///  - vocab_size(): the vocabulary its tokens index, or 0 when it only proposes tokens taken from
///    the sequence (any vocabulary);
///  - max_draft(n): the most tokens it can propose when the sequence has n tokens (context limit);
///  - start(prompt): a new sequence begins (reset, prefill);
///  - extend(sequence): the sequence grew by tokens it has not seen (a conversation's next turn):
///    catch up, reusing what it holds;
///  - keep(n): only the sequence's first n tokens are still valid (roll back the rest);
///  - draft(sequence, k, sampler) -> DraftResult: propose up to k tokens continuing the sequence,
///    handing them to the sampler (sampler.draft / draft_next for a model, whose rows the sampler
///    keeps; sampler.propose for point masses). Checked per sampler type by DrafterFor.
template <class D>
concept Drafter = requires(D& d, const D& cd, std::span<const token_t> sequence, std::size_t n) {
  { cd.vocab_size() } -> std::convertible_to<std::size_t>;
  { cd.max_draft(n) } -> std::convertible_to<std::size_t>;
  d.start(sequence);
  d.extend(sequence);
  d.keep(n);
};

template <class D, class S>
concept DrafterFor = Drafter<D> && RoundSampler<S> &&
    requires(D& d, std::span<const token_t> sequence, std::size_t k, S& sampler) {
  { d.draft(sequence, k, sampler) } -> std::same_as<DraftResult>;
};

/// Capability: D drafts in steps that a driver may run itself (ModelDrafter with a
/// SteppedDraftSampler): step_input() says what to feed the draft model next (empty: the draft is
/// complete), step_output() takes the rows the driver computed for it. BatchedRounds
/// (decoder/batched.hpp) batches the draft model's forwards of several sequences this way, as it
/// batches the target's; other drafters draft at once in draft().
template <class D, class S>
concept SteppedDrafter = Drafter<D> &&
    requires(D& d, S& s, std::span<const token_t> sequence, std::size_t n, LogitsView rows) {
  { d.step_input(sequence, n, s) } -> std::same_as<std::span<const token_t>>;
  d.step_output(sequence, n, rows, n, s);
  d.check_draft(sequence, n);
  d.model();
};

// ------------------------------------------------------------------------------ ModelDrafter

namespace detail {

/// Feeds a draft model what it does not hold of the sequence minus its last token (as far as it
/// fits in its context): the prefill of ModelDrafter and ModelTreeDrafter.
template <CausalLM M>
void prefill_draft(M& model, std::span<const token_t> sequence) {
  const std::size_t cached = model.cached();
  const std::size_t n =
      std::min(sequence.empty() ? 0 : sequence.size() - 1, model.context_length());
  if (n <= cached) return;
  const LogitsView logits = model.forward(sequence.subspan(cached, n - cached));
  check_logits(logits, n - cached, model.vocab_size(), "draft model (prefill)", logits_memory_v<M>);
}

}  // namespace detail

/// A draft model as a Drafter.
///
/// Bookkeeping: the model's KV cache always holds a prefix of the sequence. draft() first feeds
/// the tokens of the sequence the model has not consumed yet (the last correction or bonus token,
/// preceded by x_k after a full acceptance; the last prompt token in the first round), which
/// yields the logits of q_1; then for i = 1 .. k the sampler draws x_i and, if i < k, x_i is fed
/// to get q_(i+1). x_k is never fed (its logits would go unused). After draft() the cache holds
/// the sequence plus x_1 .. x_(k-1); keep(n) cuts it back to the first n tokens.
template <CausalLM M>
class ModelDrafter {
 public:
  explicit ModelDrafter(M& model) : model_(&model) {}

  [[nodiscard]] std::size_t vocab_size() const { return model_->vocab_size(); }

  /// The model holds the sequence (n tokens) minus its last token plus x_1 .. x_(k-1): n + k - 1
  /// positions, so k <= context_length + 1 - n.
  [[nodiscard]] std::size_t max_draft(std::size_t sequence_length) const {
    const std::size_t ctx = model_->context_length();
    return sequence_length <= ctx ? ctx + 1 - sequence_length : 0;
  }

  /// Prefills the prompt minus its last token (the first draft() feeds that one). A prompt
  /// longer than the draft's context is prefilled as far as it fits; max_draft() is then 0 and
  /// the session never asks this drafter for tokens.
  void start(std::span<const token_t> prompt) {
    model_->rollback(0);
    extend(prompt);
  }

  /// Prefills what the model does not hold of the sequence minus its last token (as far as it
  /// fits in the draft's context).
  void extend(std::span<const token_t> sequence) { detail::prefill_draft(*model_, sequence); }

  template <class S>
  requires DraftSamplerFor<S, M> DraftResult draft(std::span<const token_t> sequence, std::size_t k,
                                                   S& sampler) {
    if (k == 0) return {};
    check_draft(sequence, k);
    // q_1 comes from the last row of the tokens the model has not consumed yet; the row of
    // drafted token i + 1 comes from position (sequence length - 1) + i.
    const std::size_t last = sequence.size() - 1;
    sampler.draft(*model_, sequence.subspan(model_->cached()), last);
    for (std::size_t i = 1; i < k; ++i) sampler.draft_next(*model_, last + i);
    return DraftResult{k, Proposal::sampled, k};
  }

  /// draft() in steps, for a driver that batches the draft forwards of several sequences
  /// (BatchedRounds): after check_draft(sequence, k), step i = 0 .. k-1 feeds step_input(i) to
  /// the model (what draft() feeds it: the tokens it has not consumed, then each drafted token)
  /// and passes the rows to step_output(i), which draws x_(i+1). The same forwards and draws as
  /// draft(), in the same order, so the same tokens.
  template <SteppedDraftSampler S>
  [[nodiscard]] std::span<const token_t> step_input(std::span<const token_t> sequence,
                                                    std::size_t i, const S& sampler) const {
    return i == 0 ? sequence.subspan(model_->cached()) : sampler.last_drafted();
  }
  template <SteppedDraftSampler S>
  void step_output(std::span<const token_t> sequence, std::size_t i, const LogitsView& rows,
                   std::size_t fed, S& sampler) {
    sampler.draft_rows(rows, fed, sequence.size() - 1 + i);
  }

  /// Throws unless k tokens can be drafted after `sequence` (k >= 1).
  void check_draft(std::span<const token_t> sequence, std::size_t k) const {
    if (k > max_draft(sequence.size()))
      throw Error("ModelDrafter: asked for " + std::to_string(k) + " tokens but only " +
                  std::to_string(max_draft(sequence.size())) + " fit in the draft's context");
    const std::size_t cached = model_->cached();
    if (cached >= sequence.size())
      throw Error("ModelDrafter: the draft model's cache (" + std::to_string(cached) +
                  " positions) is not a strict prefix of the sequence (" +
                  std::to_string(sequence.size()) + " tokens): was it used elsewhere meanwhile?");
  }

  void keep(std::size_t n) {
    if (model_->cached() > n) model_->rollback(n);
  }

  [[nodiscard]] M& model() { return *model_; }

 private:
  M* model_;
};

// ------------------------------------------------------------------------------ NoDrafter

/// Proposes nothing: every round is one plain target step (the autoregressive decoder).
struct NoDrafter {
  [[nodiscard]] std::size_t vocab_size() const { return 0; }
  [[nodiscard]] std::size_t max_draft(std::size_t) const { return 0; }
  void start(std::span<const token_t>) {}
  void extend(std::span<const token_t>) {}
  void keep(std::size_t) {}
  template <RoundSampler S>
  DraftResult draft(std::span<const token_t>, std::size_t, S&) {
    return {};
  }
};

// ------------------------------------------------------------------------------ NGramDrafter

/// Prompt lookup (model-free drafting): find the most recent earlier occurrence of the sequence's
/// last n tokens, for n from max_ngram down to min_ngram (the longest match wins), and propose the
/// up to k tokens that followed it. No match: no proposal (the round is a plain target step).
/// Deterministic, so q is a point mass at each proposed token.
class NGramDrafter {
 public:
  struct Options {
    std::size_t max_ngram = 3;  ///< longest suffix looked up
    std::size_t min_ngram = 1;  ///< shortest suffix looked up (>= 1)
    std::size_t window = 0;     ///< search only the last `window` tokens (0: the whole sequence)
  };

  NGramDrafter() : NGramDrafter(Options{}) {}
  explicit NGramDrafter(Options options) : options_(options) {
    if (options_.min_ngram == 0 || options_.max_ngram < options_.min_ngram)
      throw Error("NGramDrafter: need 1 <= min_ngram <= max_ngram, got min_ngram " +
                  std::to_string(options_.min_ngram) + ", max_ngram " +
                  std::to_string(options_.max_ngram));
  }

  [[nodiscard]] std::size_t vocab_size() const { return 0; }  // proposes tokens of the sequence
  [[nodiscard]] std::size_t max_draft(std::size_t) const {
    return std::numeric_limits<std::size_t>::max();
  }
  void start(std::span<const token_t>) {}
  void extend(std::span<const token_t>) {}
  void keep(std::size_t) {}

  /// The lookup: up to k tokens continuing `sequence` (none without a match) into `out`.
  void propose(std::span<const token_t> sequence, std::size_t k, std::vector<token_t>& out) const {
    out.clear();
    const std::size_t len = sequence.size();
    if (k == 0 || len < 2) return;
    const std::size_t lo = options_.window && len > options_.window ? len - options_.window : 0;
    for (std::size_t n = std::min(options_.max_ngram, len - 1); n >= options_.min_ngram; --n) {
      const auto suffix = sequence.subspan(len - n);
      // Candidates start at j in [lo, len - n - 1], most recent first; the continuation
      // sequence[j + n ...] then starts before the end of the sequence.
      for (std::size_t j = len - n; j-- > lo;) {
        if (!std::equal(suffix.begin(), suffix.end(),
                        sequence.begin() + static_cast<std::ptrdiff_t>(j)))
          continue;
        const std::size_t from = j + n;
        const std::size_t count = std::min(k, len - from);
        out.assign(sequence.begin() + static_cast<std::ptrdiff_t>(from),
                   sequence.begin() + static_cast<std::ptrdiff_t>(from + count));
        return;
      }
      if (n == 1) break;
    }
  }

  template <RoundSampler S>
  DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    propose(sequence, k, proposal_);
    sampler.propose(std::span<const token_t>(proposal_));
    return DraftResult{proposal_.size(), Proposal::point_mass, 0};
  }

  [[nodiscard]] const Options& options() const { return options_; }

 private:
  Options options_;
  std::vector<token_t> proposal_;
};

// ------------------------------------------------------------------------ SuffixDrafter

namespace detail {

/// The `count` most likely tokens of a row of logits (highest first, the lower id on ties) and
/// their softmax probabilities (temperature 1). A NaN or infinite logit throws, naming `who`.
/// The scan and the softmax's total are the sampling core's vectorised passes (a scalar exp
/// over a 152k vocabulary would cost a draft step a millisecond); `work` is their scratch.
inline void top_tokens(std::span<const float> row, std::size_t count, std::string_view who,
                       std::size_t position, std::vector<std::pair<token_t, float>>& out,
                       std::vector<float>& work) {
  out.clear();
  const sampling::detail::LogitScan scan = sampling::detail::scan_logits(row.data(), row.size());
  if (scan.bad < row.size()) throw_bad_logit(who, position, scan.bad, row[scan.bad]);
  // A small sorted list: row.size() x count comparisons at most (count is a few).
  for (std::size_t j = 0; j < row.size(); ++j) {
    if (out.size() == count && row[j] <= out.back().second) continue;
    auto at = std::find_if(out.begin(), out.end(),
                           [&](const std::pair<token_t, float>& o) { return row[j] > o.second; });
    out.insert(at, {static_cast<token_t>(j), row[j]});
    if (out.size() > count) out.pop_back();
  }
  work.resize(row.size());
  const auto softmax =
      sampling::ProcessedRow<float>::plan(row, sampling::SamplingParams{}, scan.argmax, work);
  for (auto& [token, value] : out) value = softmax.prob(static_cast<std::size_t>(token));
}

/// The best path of a best-first tree (at each level the first child found: the highest scored),
/// at most k tokens.
inline void best_path(const DraftTree& tree, std::size_t k, std::vector<token_t>& out) {
  out.clear();
  std::int32_t at = -1;
  for (std::size_t i = 0; i < tree.size() && out.size() < k; ++i)
    if (tree.parents[i] == at) {
      out.push_back(tree.tokens[i]);
      at = static_cast<std::int32_t>(i);
    }
}

/// A tree drafter's draft() for a target that verifies chains only: the best path of its tree of
/// up to 4k nodes, proposed as a chain of at most k point masses (`chain` holds it).
template <class D, RoundSampler S>
DraftResult draft_best_path(D& drafter, std::span<const token_t> sequence, std::size_t k,
                            S& sampler, std::vector<token_t>& chain) {
  best_path(drafter.draft_tree(sequence, std::max<std::size_t>(k, 1) * 4), k, chain);
  sampler.propose(std::span<const token_t>(chain));
  std::size_t passes = 0;
  if constexpr (requires { drafter.forward_passes(); }) passes = drafter.forward_passes();
  return DraftResult{chain.size(), Proposal::point_mass, passes};
}

}  // namespace detail

/// Capability: D proposes token trees (DraftTree: several continuations per node), which a session
/// verifies in one target forward when the target is a TreeCausalLM (model/causal_lm.hpp) and the
/// sampler verifies trees. draft_tree(s, n) proposes point masses; a drafter may also offer
/// draft_tree(s, n, sampler), which the session calls instead with its sampler, to draw sampled
/// candidates from the draft's distributions (ModelTreeDrafter with a SampledTreeSampler).
template <class D>
concept TreeDrafter = Drafter<D> && requires(D& d, std::span<const token_t> s, std::size_t n) {
  { d.draft_tree(s, n) } -> std::same_as<const DraftTree&>;
};

/// The suffix drafter of one sequence: an index of its own prompt and output, and optionally a
/// shared index of earlier responses; each round proposes the tree of whichever matches the
/// longer suffix of the sequence (its own on a tie). A Drafter (decoder/drafters.hpp) of point
/// masses: draft_tree() for a target that verifies trees, draft() (the tree's best path) for any
/// other.
class SuffixDrafter {
 public:
  explicit SuffixDrafter(const SuffixIndex::Options& options = {},
                         const SharedSuffixIndex* shared = nullptr, const TreeShape& shape = {})
      : options_(options), local_(options), shared_(shared), shape_(shape) {}

  // The Drafter interface: the index follows the sequence it is shown.
  [[nodiscard]] std::size_t vocab_size() const { return 0; }  // proposes tokens it has seen
  [[nodiscard]] std::size_t max_draft(std::size_t) const {
    return std::numeric_limits<std::size_t>::max();
  }
  void start(std::span<const token_t> prompt) { update(prompt); }
  void extend(std::span<const token_t> sequence) { update(sequence); }
  void keep(std::size_t) {}  // update() sees a sequence that no longer extends what it indexed

  /// This round's tree: at most max_nodes nodes (and the shape's limits).
  const DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t max_nodes) {
    TreeShape shape = shape_;
    shape.max_nodes = std::min(shape.max_nodes, max_nodes);
    last_ = propose(sequence, shape);
    return last_.tree;
  }
  /// The tree's best path (the highest-scored child at each level, at most k tokens), for a
  /// target that verifies chains only.
  template <RoundSampler S>
  DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    return detail::draft_best_path(*this, sequence, k, sampler, chain_);
  }
  [[nodiscard]] const TreeShape& shape() const noexcept { return shape_; }

  /// Brings the local index up to `sequence` (the whole sequence: prompt + output). A sequence
  /// that is not an extension of what was indexed (an edited conversation) is indexed afresh.
  void update(std::span<const token_t> sequence) {
    const bool extends = sequence.size() >= indexed_.size() &&
                         std::equal(indexed_.begin(), indexed_.end(), sequence.begin());
    if (!extends) {
      local_ = SuffixIndex(options_);
      cursor_ = {};
      indexed_.clear();
    }
    for (std::size_t i = indexed_.size(); i < sequence.size(); ++i) {
      local_.append(cursor_, sequence[i]);
      indexed_.push_back(sequence[i]);
    }
  }

  struct Lookup {
    DraftTree tree;
    std::size_t match_length = 0;  ///< tokens of the sequence's suffix the tree continues
    bool from_shared = false;
  };
  /// update(sequence), then the tree of the longer match.
  Lookup propose(std::span<const token_t> sequence, const TreeShape& shape) {
    update(sequence);
    const SuffixIndex::Match m = local_.longest_match(sequence, shape.min_match, shape.max_match);
    Lookup out{local_.propose_from(m, shape), m.length, false};
    if (shared_ != nullptr) {
      SharedSuffixIndex::Lookup s = shared_->propose(sequence, shape);
      if (s.match_length > out.match_length) out = {std::move(s.tree), s.match_length, true};
    }
    return out;
  }

  [[nodiscard]] const SuffixIndex& local() const noexcept { return local_; }
  /// The last draft_tree()'s proposal (match length, which index).
  [[nodiscard]] const Lookup& last() const noexcept { return last_; }

 private:
  SuffixIndex::Options options_;
  SuffixIndex local_;
  SuffixIndex::Cursor cursor_;
  std::vector<token_t> indexed_;
  const SharedSuffixIndex* shared_;
  TreeShape shape_;
  Lookup last_;
  std::vector<token_t> chain_;
};

static_assert(TreeDrafter<SuffixDrafter>);

// ------------------------------------------------------------------------ ModelTreeDrafter

/// The shape of ModelTreeDrafter's trees. SGLang's --speculative-eagle-topk is branch = expand,
/// its --speculative-num-steps max_depth; llama.cpp's --draft-p-min and --draft-p-split (its
/// tree example) are min_score and split.
struct ModelTreeOptions {
  std::size_t branch = 2;     ///< children of an expanded node at most: its most likely tokens
  std::size_t expand = 2;     ///< nodes expanded per level, the best scored
  std::size_t max_depth = 6;  ///< levels at most
  float min_score = 0.01f;    ///< nodes below this path probability are not expanded
  /// A child after the most likely one only where the draft gives it at least this probability
  /// (branches where the draft is unsure, not everywhere).
  float split = 0.0f;
};

/// A draft model proposing token trees (the dynamic trees of EAGLE-2, without its feature head).
/// Each level expands the `expand` best-scored nodes of the level before (those above
/// min_score), for at most max_depth levels; the draft's distribution at an expanded node gives
/// it up to `branch` children. How, depends on the decoding:
///  - greedy, or a sampler that cannot draw candidates (draft_tree without a sampler): the
///    `branch` most likely tokens, point masses, each scored by its path's probability under the
///    draft (the product of the draft's probabilities along the path: the stand-in for the chance
///    that the target accepts it);
///  - temperature > 0 with a SampledTreeSampler (the host's): `branch` distinct tokens drawn from
///    the draft's processed distribution q without replacement, verified with the recursive
///    rule for such draws (sampling/tree_verify.hpp), which accepts the first with probability
///    min(1, p/q) like a chain, not p. The c-th child's score is its parent's times the c-th
///    largest probability of q, not the drawn token's: which nodes are kept, expanded or cut
///    must not depend on the tokens drawn, or the draws would no longer have q's law
///    (docs/math.md 3.7). split applies to those ranked probabilities.
/// Either way the verifier is exact at any temperature (docs/math.md 3.6). The nodes go out
/// best-first (siblings in the order they were drawn), so a prefix keeps every node's parent.
///
/// Bookkeeping: as with ModelDrafter, the draft model's cache holds a prefix of the sequence. A
/// round feeds what it has not consumed (ending with the sequence's last token, whose row is the
/// root's distribution), then one extend_tree per level with the nodes that level expands (at
/// most `expand` tokens: on a memory-bound backend about the cost of one decode step), so every
/// expanded node is scored once. After a round the cache holds the whole sequence and, pending,
/// the expanded nodes; the next round keeps the path of them that the target accepted
/// (accept_path) instead of feeding those tokens again.
template <HostTreeCausalLM M>
class ModelTreeDrafter {
 public:
  using Options = ModelTreeOptions;

  explicit ModelTreeDrafter(M& model) : ModelTreeDrafter(model, Options{}) {}
  ModelTreeDrafter(M& model, const Options& options) : model_(&model), options_(options) {
    if (options_.branch == 0 || options_.expand == 0 || options_.max_depth == 0)
      throw Error("ModelTreeDrafter: branch, expand and max_depth must be at least 1");
    if (!(options_.min_score >= 0 && options_.min_score <= 1) ||
        !(options_.split >= 0 && options_.split <= 1))
      throw Error("ModelTreeDrafter: min_score and split are probabilities, in [0, 1]");
  }

  [[nodiscard]] std::size_t vocab_size() const { return model_->vocab_size(); }
  /// The model holds the whole sequence, then the tree's nodes.
  [[nodiscard]] std::size_t max_draft(std::size_t sequence_length) const {
    const std::size_t ctx = model_->context_length();
    return sequence_length < ctx ? ctx - sequence_length : 0;
  }
  void start(std::span<const token_t> prompt) {
    pending_.clear();
    model_->rollback(0);
    extend(prompt);
  }
  /// Prefills what the model does not hold of the sequence minus its last token.
  void extend(std::span<const token_t> sequence) {
    keep_accepted(sequence);
    detail::prefill_draft(*model_, sequence);
  }
  void keep(std::size_t n) {
    if (model_->cached() > n) {
      pending_.clear();
      model_->rollback(n);
    }
  }

  /// This round's tree of point masses: at most max_nodes nodes, best-first.
  const DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t max_nodes) {
    return grow<HostSampler>(sequence, max_nodes, nullptr);
  }

  /// This round's tree for a session whose sampler is `sampler`: sampled candidates when it can
  /// draw them and the decoding samples, else point masses.
  template <class S>
  const DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t max_nodes,
                              S& sampler) {
    if constexpr (SampledTreeSampler<S>) {
      if (!sampler.params().greedy()) return grow(sequence, max_nodes, &sampler);
    }
    return draft_tree(sequence, max_nodes);
  }

  /// The tree's best path as a chain of at most k point masses, for a target that verifies
  /// chains only.
  template <RoundSampler S>
  DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    return detail::draft_best_path(*this, sequence, k, sampler, chain_);
  }

  /// Draft model forwards of the last draft_tree().
  [[nodiscard]] std::size_t forward_passes() const noexcept { return forwards_; }
  [[nodiscard]] M& model() { return *model_; }
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  /// A node of the model's pending tree (extend_tree order): its token and parent there.
  struct Pending {
    token_t token;
    std::int32_t parent;
  };

  /// The tree of a round: point masses when `sampler` is null, else candidates it draws.
  template <class S>
  const DraftTree& grow(std::span<const token_t> sequence, std::size_t max_nodes, S* sampler) {
    tree_.clear();
    forwards_ = 0;
    const std::size_t length = sequence.size();
    max_nodes = std::min(max_nodes, max_draft(length));
    if (max_nodes == 0 || length == 0) return tree_;
    keep_accepted(sequence);
    if (model_->cached() >= length) model_->rollback(length - 1);
    pending_base_ = length;
    // Nodes in creation order: token, parent (-1: after the sequence), score, level, and the
    // node's index in the model's pending tree (-1: not scored, i.e. not expanded).
    std::vector<token_t> tokens;
    std::vector<std::int32_t> parents;
    std::vector<float> scores;
    std::vector<std::size_t> level_of;
    std::vector<std::int32_t> in_model;
    std::vector<std::int32_t> q_row_of;  // sampled: the q row of each node's children (-1: none)
    std::int32_t root_q_row = -1;
    const std::size_t budget = std::min(max_draft(length), 4 * max_nodes);  // nodes created
    const auto add_children = [&](std::span<const float> row, std::int32_t parent, float score,
                                  std::size_t level, std::size_t position) {
      if (sampler != nullptr) {
        // Candidates drawn from q, scored by q's ranked probabilities (see the class comment).
        const std::size_t vocab = vocab_size();
        const auto at = static_cast<std::int32_t>(tree_.q.size() / vocab);
        tree_.q.resize(tree_.q.size() + vocab);
        (parent < 0 ? root_q_row : q_row_of[static_cast<std::size_t>(parent)]) = at;
        path_tokens_.clear();
        for (std::int32_t a = parent; a >= 0; a = parents[static_cast<std::size_t>(a)])
          path_tokens_.push_back(tokens[static_cast<std::size_t>(a)]);
        std::reverse(path_tokens_.begin(), path_tokens_.end());
        drawn_.resize(options_.branch);
        ranked_.resize(options_.branch);
        const std::size_t drawn = sampler->draw_candidates(
            row, path_tokens_, position,
            std::span<float>(tree_.q).subspan(static_cast<std::size_t>(at) * vocab, vocab), drawn_,
            ranked_);
        for (std::size_t c = 0; c < drawn; ++c) {
          if (tokens.size() == budget) return;
          if (c > 0 && ranked_[c] < options_.split) return;
          tokens.push_back(drawn_[c]);
          parents.push_back(parent);
          scores.push_back(score * ranked_[c]);
          level_of.push_back(level);
          in_model.push_back(-1);
          q_row_of.push_back(-1);
        }
        return;
      }
      detail::top_tokens(row, options_.branch, "draft model", position, top_, work_);
      for (std::size_t c = 0; c < top_.size(); ++c) {
        const auto [token, p] = top_[c];
        if (tokens.size() == budget) return;
        if (c > 0 && p < options_.split) return;  // the most likely first: no more above split
        tokens.push_back(token);
        parents.push_back(parent);
        scores.push_back(score * p);
        level_of.push_back(level);
        in_model.push_back(-1);
        q_row_of.push_back(-1);
      }
    };
    {
      const std::span<const token_t> feed = sequence.subspan(model_->cached());
      const LogitsView rows = model_->forward(feed);
      ++forwards_;
      detail::check_logits(rows, feed.size(), vocab_size(), "draft model", logits_memory_v<M>);
      add_children(rows.row(rows.rows - 1), -1, 1.0f, 1, length - 1);
    }
    for (std::size_t level = 1; level < options_.max_depth && tokens.size() < budget; ++level) {
      // The best-scored nodes of this level (the lower index on ties), above min_score.
      std::vector<std::size_t> frontier;
      for (std::size_t i = 0; i < tokens.size(); ++i)
        if (level_of[i] == level && scores[i] >= options_.min_score) frontier.push_back(i);
      if (frontier.empty()) break;
      std::stable_sort(frontier.begin(), frontier.end(),
                       [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
      std::size_t expand = options_.expand;
      if constexpr (requires { M::max_tree_nodes; })  // the model's tree is bounded
        expand = std::min(expand, M::max_tree_nodes - std::min(M::max_tree_nodes, pending_.size()));
      if (frontier.size() > expand) frontier.resize(expand);
      if (frontier.empty()) break;
      // Only the expanded nodes are scored; their parents were expanded a level before, so they
      // are in the model's tree already.
      level_tokens_.clear();
      level_parents_.clear();
      for (const std::size_t i : frontier) {
        level_tokens_.push_back(tokens[i]);
        level_parents_.push_back(parents[i] < 0 ? -1
                                                : in_model[static_cast<std::size_t>(parents[i])]);
      }
      const LogitsView rows = model_->extend_tree(level_tokens_, level_parents_);
      ++forwards_;
      for (std::size_t j = 0; j < frontier.size(); ++j) {
        in_model[frontier[j]] = static_cast<std::int32_t>(pending_.size());
        pending_.push_back(Pending{level_tokens_[j], level_parents_[j]});
      }
      detail::check_logits(rows, frontier.size(), vocab_size(), "draft model", logits_memory_v<M>);
      for (std::size_t j = 0; j < frontier.size(); ++j)
        add_children(rows.row(j), static_cast<std::int32_t>(frontier[j]), scores[frontier[j]],
                     level + 1, length + level - 1);
    }
    // Best-first: the score, higher first, then creation order (a child never scores above its
    // parent and comes after it, so every parent precedes its children).
    std::vector<std::size_t> order(tokens.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
    if (order.size() > max_nodes) order.resize(max_nodes);
    std::vector<std::int32_t> renumbered(tokens.size(), -1);
    if (sampler != nullptr) {
      tree_.proposal = sampling::TreeProposal::sampled_without_replacement;
      tree_.vocab = vocab_size();
      tree_.q_rows.assign(1, root_q_row);
    }
    for (const std::size_t i : order) {
      const std::int32_t parent =
          parents[i] < 0 ? -1 : renumbered[static_cast<std::size_t>(parents[i])];
      if (parents[i] >= 0 && parent < 0) continue;  // its parent was cut: so is it
      renumbered[i] = static_cast<std::int32_t>(tree_.size());
      tree_.tokens.push_back(tokens[i]);
      tree_.parents.push_back(parent);
      tree_.scores.push_back(scores[i]);
      if (sampler != nullptr) tree_.q_rows.push_back(q_row_of[i]);
    }
    return tree_;
  }

  /// Keeps, of the tree the last round left pending in the model, the path that `sequence`
  /// follows (the tokens after the round's sequence, except the newest, which is fed to get the
  /// next root's row), so that those tokens are not fed again.
  void keep_accepted(std::span<const token_t> sequence) {
    if (pending_.empty() || model_->cached() != pending_base_ || sequence.size() <= pending_base_) {
      pending_.clear();
      return;
    }
    path_.clear();
    std::int32_t at = -1;
    for (std::size_t pos = pending_base_; pos + 1 < sequence.size(); ++pos) {
      std::int32_t next = -1;
      for (std::size_t i = 0; i < pending_.size() && next < 0; ++i)
        if (pending_[i].parent == at && pending_[i].token == sequence[pos])
          next = static_cast<std::int32_t>(i);
      if (next < 0) break;
      path_.push_back(static_cast<std::size_t>(next));
      at = next;
    }
    pending_.clear();
    if (!path_.empty()) model_->accept_path(path_);
  }

  M* model_;
  Options options_;
  DraftTree tree_;
  std::vector<token_t> chain_;
  std::vector<std::pair<token_t, float>> top_;
  std::vector<float> work_;  ///< top_tokens' scratch
  std::size_t forwards_ = 0;
  std::vector<Pending> pending_;  ///< the model's pending tree, after pending_base_ positions
  std::size_t pending_base_ = 0;
  std::vector<token_t> level_tokens_;
  std::vector<std::int32_t> level_parents_;
  std::vector<std::size_t> path_;
  std::vector<token_t> path_tokens_;  ///< sampled: the tokens of an expanded node's path
  std::vector<token_t> drawn_;        ///< sampled: a node's candidates, in the order drawn
  std::vector<float> ranked_;         ///< sampled: q's largest probabilities, their scores
};

// ------------------------------------------------------------------------ LookupThenModelDrafter

/// Prompt lookup first, a draft model when the lookup has nothing: a round proposes the n-gram
/// continuation when the sequence's last tokens (at least options.min_ngram of them) occurred
/// before, else k tokens of the draft model. Each round's proposal is one or the other, so the
/// verifier sees either point masses or the model's q, both exact. The model catches up on the
/// tokens of lookup rounds the next time it drafts (ModelDrafter feeds what it has not consumed).
/// Use min_ngram >= 2: a single-token suffix matches almost always in a long sequence and would
/// crowd the model out with poor guesses.
template <CausalLM M>
class LookupThenModelDrafter {
 public:
  LookupThenModelDrafter(M& model, NGramDrafter::Options options)
      : model_(model), lookup_(options) {}

  [[nodiscard]] std::size_t vocab_size() const { return model_.vocab_size(); }
  /// The model's limit: a lookup round never asks for more than a model round could draft.
  [[nodiscard]] std::size_t max_draft(std::size_t n) const { return model_.max_draft(n); }
  void start(std::span<const token_t> prompt) { model_.start(prompt); }
  void extend(std::span<const token_t> sequence) { model_.extend(sequence); }
  void keep(std::size_t n) { model_.keep(n); }

  template <class S>
  requires DraftSamplerFor<S, M> DraftResult draft(std::span<const token_t> sequence, std::size_t k,
                                                   S& sampler) {
    if (k == 0) return {};
    lookup_.propose(sequence, k, proposal_);
    if (!proposal_.empty()) {
      sampler.propose(std::span<const token_t>(proposal_));
      ++lookup_rounds_;
      return DraftResult{proposal_.size(), Proposal::point_mass, 0};
    }
    return model_.draft(sequence, k, sampler);
  }

  /// Rounds drafted by lookup so far (the others were drafted by the model).
  [[nodiscard]] std::size_t lookup_rounds() const { return lookup_rounds_; }
  [[nodiscard]] M& model() { return model_.model(); }

 private:
  ModelDrafter<M> model_;
  NGramDrafter lookup_;
  std::vector<token_t> proposal_;
  std::size_t lookup_rounds_ = 0;
};

// ------------------------------------------------------------------------ SuffixThenModelDrafter

/// Suffix decoding first, the draft model's tree when the suffix match is weak: a round proposes
/// the suffix drafter's tree when its scores add up to at least min_suffix_tokens (the tokens it
/// expects accepted: a stretch of an edited file, an earlier response), else the draft model's
/// tree (ModelTreeDrafter: sampled candidates at temperature > 0). Each round's tree is one or
/// the other, and says how it was proposed, so verification stays exact. A
/// suffix round costs no draft forward; the model catches up on its tokens the next time it
/// drafts.
template <HostTreeCausalLM M>
class SuffixThenModelDrafter {
 public:
  /// Below this expected count the model drafts; 1: the suffix tree must expect a whole token.
  static constexpr float kMinSuffixTokens = 1.0f;

  SuffixThenModelDrafter(M& model, SuffixDrafter suffix, const ModelTreeOptions& shape = {},
                         float min_suffix_tokens = kMinSuffixTokens)
      : suffix_(std::move(suffix)), model_(model, shape), min_suffix_tokens_(min_suffix_tokens) {}

  [[nodiscard]] std::size_t vocab_size() const { return model_.vocab_size(); }
  [[nodiscard]] std::size_t max_draft(std::size_t n) const { return model_.max_draft(n); }
  void start(std::span<const token_t> prompt) {
    suffix_.start(prompt);
    model_.start(prompt);
  }
  void extend(std::span<const token_t> sequence) {
    suffix_.extend(sequence);
    model_.extend(sequence);
  }
  void keep(std::size_t n) { model_.keep(n); }

  const DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t max_nodes) {
    HostSampler* no_sampler = nullptr;
    return draft_tree_with(sequence, max_nodes, no_sampler);
  }
  /// The same, the model's tree of sampled candidates where `sampler` can draw them
  /// (ModelTreeDrafter::draft_tree).
  template <class S>
  const DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t max_nodes,
                              S& sampler) {
    S* with = &sampler;
    return draft_tree_with(sequence, max_nodes, with);
  }
  /// The tree's best path, for a target that verifies chains only.
  template <RoundSampler S>
  DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    return detail::draft_best_path(*this, sequence, k, sampler, chain_);
  }

  /// Draft model forwards of the last draft_tree() (0 when the suffix tree was proposed).
  [[nodiscard]] std::size_t forward_passes() const noexcept {
    return from_model_ ? model_.forward_passes() : 0;
  }
  /// Rounds the suffix drafter proposed so far (the others were the model's).
  [[nodiscard]] std::size_t suffix_rounds() const noexcept { return suffix_rounds_; }
  [[nodiscard]] M& model() { return model_.model(); }
  [[nodiscard]] SuffixDrafter& suffix() noexcept { return suffix_; }

 private:
  template <class S>
  const DraftTree& draft_tree_with(std::span<const token_t> sequence, std::size_t max_nodes,
                                   S* sampler) {
    const DraftTree& tree = suffix_.draft_tree(sequence, max_nodes);
    float expected = 0;
    for (const float s : tree.scores) expected += s;
    from_model_ = tree.empty() || expected < min_suffix_tokens_;
    if (!from_model_) {
      ++suffix_rounds_;
      return tree;
    }
    if (sampler == nullptr) return model_.draft_tree(sequence, max_nodes);
    return model_.draft_tree(sequence, max_nodes, *sampler);
  }

  SuffixDrafter suffix_;
  ModelTreeDrafter<M> model_;
  float min_suffix_tokens_;
  bool from_model_ = false;
  std::size_t suffix_rounds_ = 0;
  std::vector<token_t> chain_;
};

// ------------------------------------------------------------------------------ adaptive k

/// Chooses the draft length of the next round from the running acceptance.
///
/// Model (Leviathan et al. 2023, section 3): each drafted token is accepted independently with
/// probability a. A round that drafts k tokens then emits E(k) = (1 - a^(k+1)) / (1 - a) tokens
/// on average and costs C(k) target-step units. The rule picks k in [min_k, max_k] maximising
/// E(k) / C(k), the expected tokens per unit of time (the smaller k on ties). C(k) is
/// Options::round_cost[k] when given: measured on the machine and models at hand, C(k) =
/// (T(k+1) + k D) / T(1) with T(n) the target's forward over n tokens and D a draft step
/// (measure_round_costs, decoder/cost_model.hpp, times them once before decoding; the costs are
/// then fixed, so the choice of k still depends only on the accepted counts). Otherwise
/// C(k) = 1 + c k with c = Options::draft_cost, a guess.
///
/// a is estimated from the rounds seen so far as a geometric acceptance model: a round that
/// drafted k' tokens and accepted n contributes n acceptances and one rejection if n < k'. The
/// estimate is (A + prior_accepts) / (A + R + prior_accepts + prior_rejects), where A and R are
/// exponentially decayed counts (each round multiplies the old counts by `decay`), so the rule
/// follows changes in difficulty (code vs prose, repetitive stretches). The first round uses
/// initial_k. The rule depends only on the accepted counts and fixed costs, never on timings
/// taken during the run, so a run stays reproducible from its seed.
class AdaptiveDraftLength {
 public:
  struct Options {
    std::size_t min_k = 1;
    std::size_t max_k = 8;
    std::size_t initial_k = 4;
    double draft_cost = 0.25;  ///< c: cost of one more drafted token / cost of a target step
    /// C(k) for k = 0 .. max_k (at least max_k + 1 entries, finite, > 0): the time of a round
    /// drafting k tokens in target steps (C(0) = 1). Empty: C(k) = 1 + draft_cost k.
    std::vector<double> round_cost{};
    double decay = 0.8;          ///< weight of the previous counts at each round, in [0, 1)
    double prior_accepts = 1.0;  ///< pseudo-counts of the estimate
    double prior_rejects = 1.0;
  };

  AdaptiveDraftLength() : AdaptiveDraftLength(Options{}) {}
  explicit AdaptiveDraftLength(Options options) : options_(std::move(options)) {
    if (options_.min_k == 0 || options_.max_k < options_.min_k)
      throw Error("AdaptiveDraftLength: need 1 <= min_k <= max_k");
    if (!(options_.decay >= 0 && options_.decay < 1))
      throw Error("AdaptiveDraftLength: decay must be in [0, 1)");
    if (!(options_.draft_cost >= 0) || !std::isfinite(options_.draft_cost))
      throw Error("AdaptiveDraftLength: draft_cost must be finite and >= 0");
    if (!(options_.prior_accepts > 0 && options_.prior_rejects > 0))
      throw Error("AdaptiveDraftLength: the priors must be > 0");
    if (!options_.round_cost.empty()) {
      if (options_.round_cost.size() <= options_.max_k)
        throw Error("AdaptiveDraftLength: round_cost has " +
                    std::to_string(options_.round_cost.size()) +
                    " entries, need max_k + 1 = " + std::to_string(options_.max_k + 1));
      for (const double c : options_.round_cost)
        if (!(c > 0) || !std::isfinite(c))
          throw Error("AdaptiveDraftLength: every round_cost must be finite and > 0");
    }
    reset();
  }

  /// Forgets the rounds seen (a new generation starts).
  void reset() {
    accepts_ = rejects_ = 0;
    k_ = std::clamp(options_.initial_k, options_.min_k, options_.max_k);
  }

  /// The draft length for the next round.
  [[nodiscard]] std::size_t next() const { return k_; }

  /// The current estimate of the per-token acceptance probability a.
  [[nodiscard]] double acceptance() const {
    return (accepts_ + options_.prior_accepts) /
           (accepts_ + rejects_ + options_.prior_accepts + options_.prior_rejects);
  }

  /// Records a round that drafted `drafted` (> 0) tokens and accepted `accepted`.
  void update(std::size_t drafted, std::size_t accepted) {
    if (drafted == 0) return;
    accepts_ = options_.decay * accepts_ + static_cast<double>(accepted);
    rejects_ = options_.decay * rejects_ + (accepted < drafted ? 1.0 : 0.0);
    const double a = acceptance();
    double best = -1;
    for (std::size_t k = options_.min_k; k <= options_.max_k; ++k) {
      // E(k) = 1 + a + ... + a^k, summed directly (no division by 1 - a).
      double expected = 0;
      double power = 1;
      for (std::size_t i = 0; i <= k; ++i, power *= a) expected += power;
      const double rate = expected / cost(k);
      if (rate > best) {
        best = rate;
        k_ = k;
      }
    }
  }

  [[nodiscard]] const Options& options() const { return options_; }

  /// C(k): the cost of a round drafting k tokens, in target steps.
  [[nodiscard]] double cost(std::size_t k) const {
    return options_.round_cost.empty() ? 1.0 + options_.draft_cost * static_cast<double>(k)
                                       : options_.round_cost[k];
  }

 private:
  Options options_;
  double accepts_ = 0;
  double rejects_ = 0;
  std::size_t k_ = 1;
};

}  // namespace specdec
