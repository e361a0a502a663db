#pragma once
// The step between the QKV projection and attention, in one kernel: for each new token t at
// position p = *start + t and each head of the fused QKV output,
//   v heads:      v (+ bias)                                        -> V cache at p
//   q and k heads: x (+ bias) -> RMSNorm over the head (Qwen3 only) -> rotary(p) -> q_out / K cache
// In a token tree (tree != null) token t is written at slot *start + t as above but rotated for
// its position in the sequence, prefix + depth (attention.hpp, TreeRows).
// Rotary pairs are (x[2i], x[2i+1]) (RopeLayout::adjacent_pairs) or (x[i], x[i + d/2])
// (RopeLayout::rotate_half), rotated by angle p * inv_freq[i]:
//   a' = a cos - b sin,  b' = b cos + a sin.

#include <cuda_runtime.h>

#include "kernels/attention.hpp"
#include "kernels/types.hpp"
#include "specdec/model/config.hpp"

namespace specdec::cuda::kernels {

struct RopeKvParams {
  const float* qkv = nullptr;  ///< [n][(n_heads + 2 n_kv) * head_dim]: q heads, k heads, v heads
  int n = 0;
  int n_heads = 0;
  int n_kv = 0;
  int head_dim = 0;               ///< even
  const float* bias = nullptr;    ///< [(n_heads + 2 n_kv) * head_dim] or null (Qwen2 has one)
  const float* q_norm = nullptr;  ///< [head_dim] or null (Qwen3 q/k norms)
  const float* k_norm = nullptr;
  float norm_eps = 1e-6f;
  const float* inv_freq = nullptr;  ///< [head_dim / 2]
  RopeLayout layout = RopeLayout::adjacent_pairs;
  const int* start = nullptr;  ///< device scalar: the position of token 0
  float* q_out = nullptr;      ///< [n][n_heads][head_dim]
  KvType kv_type = KvType::f16;
  void* k_cache = nullptr;         ///< this layer's K: [n_kv][capacity][head_dim]
  void* v_cache = nullptr;         ///< this layer's V: [n_kv][capacity][head_dim]
  int capacity = 0;                ///< positions per head in the cache (*start + n <= capacity)
  const TreeRows* tree = nullptr;  ///< device: the tokens are tree nodes (positions by depth)
};

void rope_kv_write(const RopeKvParams& p, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
