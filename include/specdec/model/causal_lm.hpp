#pragma once
// The model concept every backend satisfies and every decoder is written against.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/common.hpp"

namespace specdec {

/// Where a buffer lives.
enum class Memory { host, device };

/// Logits returned by a forward pass: `rows` rows of `vocab` floats, row-major, contiguous.
/// Valid until the next call on the model that produced it.
struct LogitsView {
  const float* data = nullptr;
  std::size_t rows = 0;
  std::size_t vocab = 0;
  Memory where = Memory::host;

  /// Row r as a span (host memory only).
  [[nodiscard]] std::span<const float> row(std::size_t r) const {
    return {data + r * vocab, vocab};
  }
};

/// Token ids in device memory, e.g. the tokens a sampling kernel drafted: a model whose logits live
/// in device memory (cuda::Transformer) takes them as forward() input without a round trip
/// through the host.
struct DeviceTokens {
  const token_t* data = nullptr;
  std::size_t count = 0;
};

/// Where a model type's forward() returns its logits, fixed at compile time so that the decoders
/// pick the sampler that reads them there (sampling/round.hpp) and a pair of models whose logits
/// live in different memories is a compile error. A model type declares device logits with
///   static constexpr Memory logits_memory = Memory::device;
/// (cuda::Transformer does); any other type has host logits.
template <class M>
inline constexpr Memory logits_memory_v = Memory::host;
template <class M>
requires requires {
  { M::logits_memory } -> std::convertible_to<Memory>;
}
inline constexpr Memory logits_memory_v<M> = M::logits_memory;

/// A model type whose forward() may return before its work is done (it enqueues work on a device
/// stream) declares the completion point
///   void synchronize();   // returns once every call made so far has finished
/// A model with device logits must have one (CausalLM checks); a host model computes its logits
/// before forward() returns and needs none.
template <class M>
concept HasCompletionPoint = requires(M& m) {
  m.synchronize();
};

/// A model whose work a host clock can time: its logits are on the host (forward() finishes before
/// it returns) or it has a completion point.
template <class M>
concept Synchronizable = (logits_memory_v<M> == Memory::host) || HasCompletionPoint<M>;

/// A causal language model with a KV cache.
///  - forward(t) appends the tokens t after the cached prefix and returns one logits row per token;
///  - rollback(n) keeps the first n cached positions (O(1), n <= cached());
///  - specdec::synchronize(m) waits until the work of the calls so far has finished: what a
///    timing must call before it reads its clock (free for host models).
template <class M>
concept CausalLM = requires(M& m, const M& cm, std::span<const token_t> t, std::size_t n) {
  { cm.vocab_size() } -> std::convertible_to<std::size_t>;
  { cm.context_length() } -> std::convertible_to<std::size_t>;
  { cm.cached() } -> std::convertible_to<std::size_t>;
  { m.forward(t) } -> std::same_as<LogitsView>;
  {m.rollback(n)};
  requires Synchronizable<M>;
};

/// A CausalLM that also scores a token tree in one forward (tree speculation):
///  - forward_tree(tokens, parents) scores node i = tokens[i] after the cached prefix and the
///    path to it (parents[i] = -1: directly after the prefix, else an earlier node), row i being
///    bitwise what forward() of that path would give; cached() does not move;
///  - extend_tree(tokens, parents) adds nodes to that tree (parents index the whole tree, the
///    earlier nodes first) and scores only them, as forward_tree() of the whole tree would;
///  - accept_path(path) then keeps one root-to-node path, as if forward() had appended it.
template <class M>
concept TreeCausalLM = CausalLM<M> &&
    requires(M& m, std::span<const token_t> t, std::span<const std::int32_t> parents,
             std::span<const std::size_t> path) {
  { m.forward_tree(t, parents) } -> std::same_as<LogitsView>;
  { m.extend_tree(t, parents) } -> std::same_as<LogitsView>;
  m.accept_path(path);
};

/// A TreeCausalLM whose logits the host reads (the CPU backend): what a drafter that inspects the
/// draft's distributions itself needs (ModelTreeDrafter reads its top tokens on the host).
template <class M>
concept HostTreeCausalLM = TreeCausalLM<M> &&(logits_memory_v<M> == Memory::host);

/// The completion point of any model: M::synchronize() where the type has one (a device model:
/// waits for its stream), nothing otherwise (a host model's forward() has finished on return).
/// A host clock read after forward() measures the model's work only after this.
template <class M>
void synchronize(M& model) {
  if constexpr (HasCompletionPoint<M>) model.synchronize();
}

}  // namespace specdec
