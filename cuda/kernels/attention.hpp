#pragma once
// Attention of n new tokens over the KV cache (decode n = 1, verify n <= 16; correct for any n,
// but not tuned for prefill):
//   out[t][h] = softmax_j(scale * q[t][h] . K[h / group][j], j <= start + t) V[h / group][j]
// for j over the cached positions 0 .. start + n - 1 (the new tokens' K/V are already written),
// grouped-query attention (group = n_heads / n_kv), causal among the new tokens.
//
// Long contexts are split over the key axis (flash-decoding): block `s` of a KV head computes an
// unnormalised partial result (running max m, sum l, sum of p V) over the keys
// [s * chunk, (s + 1) * chunk), and a second kernel combines the partials in split order. With
// one split the first kernel writes the output directly (same bits as the combine would give).
//
// The split boundaries are absolute key positions (a fixed `chunk`), and keys a query may not
// see contribute exact no-ops, so a query row's result does not depend on how many other tokens
// share the call: attention is batch-invariant like the skinny GEMM. The launch also reads the
// cache length from the device (*start), so a captured CUDA graph stays valid until the context
// needs one more split.
//
// Token trees (AttentionParams::tree, Transformer::forward_tree): the n new tokens are nodes of a
// tree whose K/V sit in the cache slots after the prefix in node order, not in positions. Row t
// must see the prefix and the path to its node, and nothing else, and (tree invariance) give
// bitwise what the plain forward of that path gives. So the kernel walks *logical* key positions,
// those of the plain forward of the row's path: position prefix + e (e <= depth) is the path's
// node at depth e, read from its slot, and everything past the path is masked. The tiles, the
// splits and the order of every sum are those of the plain forward; only the address a K/V row is
// read from changes (the tree's nodes, at most 64, are staged in shared memory once per block).
// A tree of more than 16 nodes is scored in several steps of at most 16 rows (the skinny GEMM's
// limit); a later step's rows read the earlier steps' nodes from their slots like their own.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/types.hpp"

namespace specdec::cuda::kernels {

/// Nodes of a token tree (Transformer::max_tree_nodes), all of them staged in shared memory.
inline constexpr int kMaxTreeNodes = 64;

/// The tree shape of a step's n rows (device memory; a plain step passes none). Row t is node
/// first + t; its K/V slot is *start + t, so the prefix is the first *start - first positions.
/// Node i's parent is an earlier node or the prefix: its depth is 0 after the prefix.
struct TreeRows {
  int first = 0;                  ///< nodes of the tree scored by earlier steps (extend_tree)
  int depth[kMaxTreeNodes] = {};  ///< row t: its node's depth (its rotary position: prefix + depth)
  /// ancestor[t][e]: the node at depth e on row t's path (e <= depth[t]; e = depth[t]: its own).
  /// Bytes: a node index is below 64, and the struct is copied to the device every tree step.
  std::uint8_t ancestor[kMaxTreeNodes][kMaxTreeNodes] = {};
};

/// Tree nodes a step stages for `nodes` nodes (first + n): a multiple of 16, so that a CUDA graph
/// captured for one tree step serves every step whose tree has as many nodes, rounded up.
inline int tree_staged_nodes(int nodes) { return (nodes + 15) / 16 * 16; }

struct AttentionParams {
  const float* q = nullptr;  ///< [n][n_heads][head_dim], rotated
  KvType kv_type = KvType::f16;
  const void* k_cache = nullptr;  ///< this layer's K: [n_kv][capacity][head_dim]
  const void* v_cache = nullptr;  ///< this layer's V: [n_kv][capacity][head_dim]
  int capacity = 0;
  const int* start = nullptr;  ///< device scalar: cached positions before the n new tokens
  int n = 0;
  int n_heads = 0;
  int n_kv = 0;
  int head_dim = 0;                ///< a multiple of 8, at most 256
  float scale = 1.0f;              ///< usually 1 / sqrt(head_dim)
  int chunk = 64;                  ///< keys per split, a multiple of 32
  int splits = 1;                  ///< blocks per KV head; >= ceil((*start + n) / chunk)
  float* partial = nullptr;        ///< workspace, attention_workspace_floats() (splits > 1 only)
  float* out = nullptr;            ///< [n][n_heads * head_dim]
  const TreeRows* tree = nullptr;  ///< device: the rows form a token tree (n <= kMaxTreeNodes)
  /// Trees: the nodes the shared memory holds, at least tree->first + n and at most
  /// kMaxTreeNodes (tree_staged_nodes). Read on the host: the launch's shared-memory size.
  int tree_nodes = 0;
};

/// Floats of workspace the split kernel needs: splits * n * n_heads * (head_dim + 2).
std::size_t attention_workspace_floats(int splits, int n, int n_heads, int head_dim);

/// The split length for a model: enough splits at a full context (`capacity` keys) to give the
/// GPU two blocks per multiprocessor, but at least 128 keys per split (each split writes and the
/// combine reads head_dim + 2 floats per query row, which must stay small next to the K/V bytes).
int attention_chunk(int capacity, int n_kv, int multiprocessors);

/// Blocks per KV head for a context of kv_len keys.
inline int attention_splits(int kv_len, int chunk) { return (kv_len + chunk - 1) / chunk; }

/// `warps` per block (4 on a GPU; the tests also run 1 and 2).
void attention(const AttentionParams& p, cudaStream_t stream, int warps = 4);

}  // namespace specdec::cuda::kernels
