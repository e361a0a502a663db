#pragma once
// What one decode step must read from memory, for the roofline columns of bench_cpu and
// bench_cuda: every matrix of the layers plus the output head (the embedding contributes one row,
// which is left out), and the KV cache of the positions attended to.
#include <cstddef>

#include "specdec/model/config.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::bench {

/// Bytes of the weights one forward reads: the layers' matrices in their stored types, and the
/// head (token_embd when the embedding is tied).
inline std::size_t weight_bytes_per_forward(const ModelConfig& c, const WeightStore& w) {
  std::size_t total = 0;
  for (const auto& [name, t] : w.tensors())
    if (name.starts_with("blk.") && t.shape.size() == 2) total += t.nbytes;
  const auto* out = w.find("output.weight");
  total += (out != nullptr && !c.tied_embeddings ? out : &w.get("token_embd.weight"))->nbytes;
  return total;
}

/// Bytes of K and V read by one decode step attending to `positions` positions, with KV elements
/// of `element_bytes` bytes.
inline std::size_t kv_bytes_per_forward(const ModelConfig& c, std::size_t positions,
                                        std::size_t element_bytes) {
  return c.n_layers * 2 * c.kv_dim() * positions * element_bytes;
}

}  // namespace specdec::bench
