#pragma once
// Keeping one root-to-node path of a token tree in the KV cache (Transformer::accept_path).
// A tree's nodes sit in the cache slots start, start + 1, ... in node order; the kept path's
// nodes move to start, start + 1, ..., start + count - 1, where a plain forward of the path would
// have written them (their K was rotated for those positions already: rope_kv.hpp). O(path) row
// copies per layer and KV head; no recomputation.

#include <cuda_runtime.h>

#include "kernels/attention.hpp"

namespace specdec::cuda::kernels {

/// The path, by value (a kernel argument): node[k] is the node kept at depth k. A child comes
/// after its parent, so node[k] >= k.
struct KvPath {
  int count = 0;
  int node[kMaxTreeNodes] = {};
};

/// k_cache, v_cache: [blocks][capacity][row_bytes] with blocks = n_layers * n_kv (every layer's
/// KV heads); row_bytes a multiple of 16 (head_dim * the KV type's size).
void kv_keep_path(void* k_cache, void* v_cache, int blocks, int capacity, int row_bytes, int start,
                  const KvPath& path, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
