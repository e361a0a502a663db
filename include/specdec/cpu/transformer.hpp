#pragma once
// The CPU backend: a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) with a KV cache, reading
// its weights from the memory-mapped files in place, or (the integer types on AVX512-VNNI)
// from a copy repacked at load for the kernels (Options::repack_weights).
//
// What makes it suitable for exact speculative decoding:
//  - forward(t) costs about one pass over the weights whatever t.size() is (up to 16 tokens the
//    weights are streamed from memory once; the compute per token is small next to that);
//  - rollback(n) is O(1): it only moves the end of the KV cache;
//  - batch invariance: the logits row of a position is bitwise the same whether that position
//    was computed alone or together with up to 15 other tokens in the same call (in fact for any
//    call size). Every reduction (matrix-vector dot products, attention, norms) runs in an order
//    that depends only on the position and the model, never on how many tokens share the call,
//    nor on the thread count. So greedy speculative decoding emits exactly the tokens that greedy
//    plain decoding emits.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/config.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::cpu {

struct Options {
  std::size_t threads = 0;       ///< 0: the number of physical cores this process may use
  KvType kv_type = KvType::f32;  ///< specdec/model/dtype.hpp
  /// Positions the KV cache holds; 0: the model's context length (config.context_length). The
  /// cache is allocated whole by the constructor, so a model that claims a long context (131072
  /// positions is common) needs this set to what the application will use: see
  /// Transformer::estimate_memory.
  std::size_t context_length = 0;
  /// Steps of up to 16 tokens (decode, verify) run on the workers or on the calling thread alone,
  /// whichever has been faster lately for that step size (ParallelismChooser, thread_pool.hpp):
  /// with a CPU-bound neighbour, waiting for preempted workers can cost more than they add.
  /// false: always use every thread. Results are bitwise the same either way.
  bool adaptive_threads = true;
  /// The tokens whose logits the output head computes (ids in ascending order, no repeats); every
  /// other token gets the lowest finite float (kMaskedLogit), i.e. probability exactly 0 after
  /// any processing (its softmax weight underflows to 0). Empty: the whole
  /// vocabulary. This makes a cheaper *draft*: the head of a small model is a large share of its
  /// weights (Qwen2.5-0.5B: 151936 x 896 of ~490 MB, about a third of what a step streams), and
  /// the rarely drafted tokens cost as much as the frequent ones. Speculative decoding stays
  /// exact: the draft's q is then the renormalised distribution over these tokens (0 elsewhere),
  /// and verification accepts with min(1, p/q) and resamples from norm(max(0, p - q)) as for any
  /// q. A contiguous prefix 0 .. N-1 reads the head's first N rows in place; any other list
  /// copies its rows once (N x row bytes). first_tokens(N) makes the prefix.
  std::vector<token_t> head_tokens{};
  /// Rewrite the weight matrices at load into the layout the kernels read fastest
  /// (cpu::repack_weights: the integer types when the Isa's kernels are the AVX512-VNNI ones),
  /// and release the memory map's pages of what was copied, so that resident memory stays about
  /// the file's size. Transformers over one WeightStore with the same Isa and head share one
  /// copy (a server's slots: one copy, not one per slot); it lives while one of them does.
  /// Results are bitwise the same either way; false (or the environment variable
  /// SPECDEC_REPACK=0) keeps the file's layout, for comparison.
  bool repack_weights = true;
};

/// The logit of a token outside Options::head_tokens: finite (the samplers refuse infinite
/// logits as the sign of a broken model) and so low that exp(logit - max) is exactly 0.
inline constexpr float kMaskedLogit = std::numeric_limits<float>::lowest();

/// The ids 0 .. n-1: in a byte-level BPE vocabulary (GPT-2, Llama 3, Qwen2) ids after the 256
/// byte tokens follow the merge order, which roughly follows frequency, so the first n ids are a
/// cheap stand-in for the n most frequent tokens (Options::head_tokens).
std::vector<token_t> first_tokens(std::size_t n);

/// What a Transformer allocates besides the weights (which stay in the file's memory map).
struct MemoryEstimate {
  std::size_t context_length = 0;  ///< positions of the KV cache
  std::size_t threads = 0;         ///< threads of the pool (Options::threads resolved)
  /// n_layers x 2 (K and V) x n_kv_heads x context_length x head_dim x 4 (f32) or 2 (f16) bytes
  std::size_t kv_cache_bytes = 0;
  /// Floats of attention scratch per thread: the scores of the query heads that share a K/V head,
  /// (n_heads / n_kv_heads) x context_length (AttentionArgs::scores). The constructor allocates
  /// this, so the estimate and the allocation cannot drift apart.
  std::size_t scratch_floats_per_thread = 0;
  /// threads x scratch_floats_per_thread x 4 bytes
  std::size_t scratch_bytes = 0;
  [[nodiscard]] std::size_t total() const noexcept { return kv_cache_bytes + scratch_bytes; }
};

/// Memory this process can still allocate, and which limit says so.
struct AvailableMemory {
  std::size_t bytes = 0;
  std::string limit;  ///< "MemAvailable", "RLIMIT_AS (ulimit -v)" or "the cgroup's memory.max"
};
/// The tightest of: the system's available memory (/proc/meminfo MemAvailable), the address-space
/// limit minus the address space in use (RLIMIT_AS), the memory cgroup's limit minus its usage.
/// nullopt when none of them can be read (not Linux).
std::optional<AvailableMemory> available_memory();

/// "1.5 GiB", "768 MiB", "4 KiB", "12 bytes": a byte count for messages.
std::string format_bytes(std::size_t bytes);

class Transformer {
 public:
  /// The memory the constructor would allocate for this config and options, computed without
  /// allocating anything. Throws specdec::Error when the sizes overflow (a corrupt config).
  static MemoryEstimate estimate_memory(const ModelConfig& config, const Options& options);

  /// Several Transformers may share one WeightStore (a draft and a target from one file, or two
  /// sequences of one model): weights exist once in memory. Throws specdec::Error when a tensor
  /// the config needs is missing, has the wrong shape or a dtype the CPU backend cannot use, and
  /// (before allocating) when estimate_memory() exceeds available_memory(): the message names
  /// the bytes needed and available and Options::context_length.
  Transformer(const ModelConfig& config, std::shared_ptr<const WeightStore> weights,
              const Options& options = {});
  explicit Transformer(const LoadedModel& model, const Options& options = {});
  ~Transformer();
  Transformer(Transformer&&) noexcept;
  Transformer& operator=(Transformer&&) noexcept;
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  /// Appends `tokens` after the cached prefix and returns one row of logits per token (host
  /// memory, valid until the next call). Throws specdec::Error, leaving the cache unchanged, on
  /// an empty span, a token id outside [0, vocab_size) or when the context would overflow.
  LogitsView forward(std::span<const token_t> tokens);

  /// One forward over several sequences at once: models[i] appends inputs[i] after its own
  /// cached prefix, exactly as models[i]->forward(inputs[i]) would, and result[i] is its rows of
  /// logits (in models[i]'s own buffer, valid until its next call). The weights are streamed
  /// from memory once per step of up to 256 tokens for all the sequences together, instead of
  /// once per sequence: this is how a server verifies the drafts of several requests in one
  /// pass. Each token attends only to its own sequence's KV cache, and every logits row is
  /// computed in an order that does not depend on the other rows of the step (batch
  /// invariance), so result[i] is bitwise what models[i]->forward(inputs[i]) returns alone.
  ///
  /// The models must be distinct and share one WeightStore, one config and one thread pool (the
  /// same Options::threads): e.g. one Transformer per sequence over one LoadedModel. Throws
  /// specdec::Error, leaving every cache unchanged, when they do not, when the spans differ in
  /// length, or when one input would be refused by forward() (empty, a token outside the
  /// vocabulary, past that model's context).
  static std::vector<LogitsView> forward_batch(std::span<Transformer* const> models,
                                               std::span<const std::span<const token_t>> inputs);
  /// forward_batch() where sequences may score token trees: trees[i] non-empty makes inputs[i]
  /// a tree with those parents (forward_tree()'s arguments; models[i] then keeps it for
  /// accept_path()), empty a chain as above. A tree is scored within one step (never cut). Each
  /// result is bitwise what models[i]->forward(inputs[i]) or ->forward_tree(inputs[i], trees[i])
  /// returns alone. Throws, changing no cache, on what those would refuse, or when trees is not
  /// empty and not one entry per model. A tree round of a server's slot joins the others' chains
  /// and trees in one pass over the weights (BatchedRounds).
  static std::vector<LogitsView> forward_batch(
      std::span<Transformer* const> models, std::span<const std::span<const token_t>> inputs,
      std::span<const std::span<const std::int32_t>> trees);

  /// Scores a token tree in one step (tree speculation: several drafted continuations verified
  /// at once). Node i is tokens[i]; parents[i] is -1 when the node follows the cached prefix
  /// directly, else the index of its parent node, which must come before it (parents[i] < i).
  /// Row i of the result is the logits after the prefix and the path to node i: bitwise what
  /// forward() of that path would return in its last row (an ancestor mask in the attention,
  /// and rotary positions by depth; the batch-invariance property extended to trees).
  ///
  /// The nodes' K/V occupy the cache slots cached() .. cached() + n - 1 (node order, not
  /// positions), so cached() does not move: accept_path() then keeps one path of the tree, and
  /// anything else (forward, rollback, another tree) simply overwrites the slots. Throws
  /// specdec::Error, leaving the cache unchanged, on an empty tree, more than max_tree_nodes
  /// nodes, parents that are not as above, a token outside the vocabulary, or when the n slots
  /// do not fit in the context.
  LogitsView forward_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents);
  /// Adds nodes to the tree of the last forward_tree() or extend_tree() (nothing since changed
  /// the cache; else to an empty tree) and scores only them: node first + i is tokens[i], where
  /// `first` is the number of nodes already there, and parents[i] is -1 or any earlier node of
  /// the whole tree. The rows are bitwise those forward_tree() of the whole tree would give for
  /// these nodes. A draft model growing a tree level by level pays for each node once.
  LogitsView extend_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents);
  /// Keeps the nodes `path` of the tree scored since the cache last changed (forward_tree,
  /// extend_tree): path[0] is a node whose parent is -1 and each next node is a child of the one
  /// before. Their K/V move to positions cached() ... cached() + path.size() - 1 (O(path) row
  /// copies, no recomputation) and cached() advances by path.size(), exactly as if forward() had
  /// appended the path's tokens. An empty path keeps nothing. Throws specdec::Error, changing
  /// nothing, when no tree was scored since the last change of the cache or when `path` is not
  /// such a chain.
  void accept_path(std::span<const std::size_t> path);
  /// Nodes forward_tree() takes: one step of the network.
  static constexpr std::size_t max_tree_nodes = 256;

  /// Keeps the first n cached positions. O(1). Throws specdec::Error when n > cached().
  void rollback(std::size_t n);
  void reset() {
    cached_ = 0;
    tree_parents_.clear();
  }

  [[nodiscard]] std::size_t cached() const noexcept { return cached_; }
  [[nodiscard]] std::size_t vocab_size() const noexcept { return config_.vocab_size; }
  [[nodiscard]] std::size_t context_length() const noexcept { return context_length_; }
  [[nodiscard]] const ModelConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t threads() const noexcept;
  /// Bytes of the KV cache's allocation (its pages become resident as positions are used).
  [[nodiscard]] std::size_t kv_cache_bytes() const noexcept;
  /// Bytes of the attention scratch, all threads' (MemoryEstimate::scratch_bytes).
  [[nodiscard]] std::size_t scratch_bytes() const noexcept;
  /// Bytes of the repacked copy this Transformer reads (Options::repack_weights; 0 without one),
  /// the seconds its construction spent making it (0 when it shares another Transformer's
  /// copy), and where the copy starts (the same address for Transformers that share it).
  [[nodiscard]] std::size_t repacked_bytes() const noexcept;
  [[nodiscard]] double repack_seconds() const noexcept;
  [[nodiscard]] const std::byte* repacked_weights() const noexcept;
  /// Steps of up to 16 tokens run so far with the workers and on the calling thread alone.
  struct ThreadingStats {
    std::size_t with_workers = 0;
    std::size_t alone = 0;
  };
  [[nodiscard]] ThreadingStats threading_stats() const noexcept;

 private:
  struct State;  // buffers, KV cache, resolved tensors (defined in transformer.cpp)
  /// Options::repack_weights: replaces the multiplied matrices by repacked copies.
  void repack(const WeightStore& weights);
  /// One sequence's share of a step: `tokens` appended to `model`'s cache, their logits rows
  /// written to `logits` ([tokens][vocab]).
  struct Segment {
    Transformer* model;
    std::span<const token_t> tokens;
    float* logits;
    std::span<const std::int32_t> parents{};  ///< a token tree (forward_tree); empty: a chain
    /// A tree's nodes scored by earlier steps: `tokens` are nodes first_node, first_node + 1, ...
    /// of the tree `parents` describes whole.
    std::size_t first_node = 0;
  };
  /// One pass through the network over the tokens of all segments (at most max_step_tokens in
  /// all; at most one segment per model), with this model's activation buffers. forward() is a
  /// step of one segment, forward_batch() a step of several.
  void step(std::span<const Segment> segments);
  /// step(), timed by this model's ParallelismChooser when it is a decode or verify step (at
  /// most 16 tokens in all).
  void chosen_step(std::span<const Segment> segments, std::size_t tokens);
  /// Throws (naming `who`) when `tokens` cannot be appended: empty, past the context, a token
  /// outside the vocabulary.
  void check_input(std::span<const token_t> tokens, const char* who) const;
  /// Throws (naming `who`) when `tokens` cannot be scored as nodes first, first + 1, ... of a
  /// tree with these parents (empty, too many nodes, bad parents, a token outside the
  /// vocabulary, slots past the context).
  void check_tree_input(std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                        std::size_t first, const char* who) const;
  /// forward_tree() (first = 0) and extend_tree() (first = the pending nodes): scores `tokens`
  /// as nodes first, first + 1, ... after the first `first` nodes of tree_parents_.
  LogitsView score_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                        std::size_t first, const char* who);

  ModelConfig config_;
  std::shared_ptr<const WeightStore> weights_;
  Options options_;
  std::size_t context_length_ = 0;
  std::size_t cached_ = 0;
  /// The parents of the tree scored since the cache last changed (forward_tree, extend_tree),
  /// whose K/V sit after cached_; empty when there is none (accept_path() needs it).
  std::vector<std::int32_t> tree_parents_;
  std::unique_ptr<State> state_;
};

static_assert(CausalLM<Transformer>);
static_assert(TreeCausalLM<Transformer>);

}  // namespace specdec::cpu
