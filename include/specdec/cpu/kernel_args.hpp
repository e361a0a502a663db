#pragma once
// Argument blocks of CPU kernels that are part of kernels.hpp's interface. Plain structs with no
// standard-library types: the per-instruction-set kernel files include this too (see
// src/cpu/kernels_impl.hpp for why they avoid the standard library).

#include <cstddef>
#include <cstdint>

namespace specdec::cpu {

/// The attention of `heads` query heads that share one K/V head (grouped-query attention) over
/// `count` cached positions. Each head's result is that of attending alone (kernels.hpp, attend);
/// the heads come together so that each K and V row is read and converted once for all of them.
struct AttentionArgs {
  std::size_t heads = 1;     ///< query heads
  const float* q = nullptr;  ///< [heads][head_dim]
  const void* k = nullptr;   ///< `count` rows of head_dim elements, row_stride elements apart
  const void* v = nullptr;   ///< same layout as k
  bool kv_f16 = false;       ///< k and v hold f16 (uint16) instead of f32
  std::size_t count = 0;     ///< positions attended to (>= 1)
  std::size_t head_dim = 0;
  std::size_t row_stride = 0;  ///< elements from one position to the next
  float scale = 1.0f;          ///< multiplies q . k (usually 1 / sqrt(head_dim))
  float* scores = nullptr;     ///< scratch [heads][count]
  float* out = nullptr;        ///< [heads][head_dim]; may not alias q
  /// A token tree (Transformer::forward_tree): positions j >= first_listed read the cache row
  /// listed[j - first_listed] instead of row j, because a node's ancestors are scattered over
  /// the tree's slots while the prefix before the tree is contiguous. The reductions still run
  /// over positions 0 .. count - 1 in order, so a node's output is bitwise that of its path laid
  /// out contiguously. null: position j reads row j.
  const std::size_t* listed = nullptr;
  std::size_t first_listed = 0;
};

/// The cache row that position j of `a` reads (see AttentionArgs::listed).
inline std::size_t kv_row(const AttentionArgs& a, std::size_t j) {
  return a.listed == nullptr || j < a.first_listed ? j : a.listed[j - a.first_listed];
}

/// The first element of position j's row of `base` (a.k or a.v): f16 or f32 elements.
inline const void* kv_row_data(const AttentionArgs& a, const void* base, std::size_t j) {
  const std::size_t at = kv_row(a, j) * a.row_stride;
  return a.kv_f16 ? static_cast<const void*>(static_cast<const std::uint16_t*>(base) + at)
                  : static_cast<const void*>(static_cast<const float*>(base) + at);
}

}  // namespace specdec::cpu
