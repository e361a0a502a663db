// Split-K attention for a few new tokens (see attention.hpp).
//
// Grid: (n_kv, splits, row blocks); block: `warps` warps. A block owns one KV head and one range
// of keys. The R = n * group query rows that read this KV head are processed in groups of
// warps * kRowsPerWarp rows (group g by row block g mod gridDim.z: decode and verify use one row
// block, prefill spreads its many rows over several); for each group:
//   - the group's q rows go to shared memory (f32);
//   - the key range is walked in tiles of 32 keys: the block loads the tile's K and V into
//     shared memory (converted to f32, K rows padded to avoid bank conflicts), then each warp
//     updates the online-softmax state of its rows (kept in registers):
//       lane j scores key j of the tile (a float4 dot product against the broadcast q row),
//       a warp max updates the running max m, p_j = exp(s_j - m) goes through shared memory to
//       every lane, and lane l accumulates p . V for head dimensions l, l + 32, ...;
//     the per-lane partial sums of p are combined once per row at the end.
//   - each row's (m, l, sum p V) is written as a partial result (or, with one split, normalised
//     into the output directly).
// For decode and verify (R <= warps * kRowsPerWarp, e.g. n * group <= 16) every K/V element is
// read from memory once. Larger R re-reads tiles per row group (from L2); prefill is correct but
// not tuned.
// No atomics: the result is deterministic, and the partials are combined in split order.
//
// Token trees (kTree, attention.hpp): the tree's nodes' K/V (at most 64 rows, p.tree_nodes
// reserved) are staged in shared memory once per block; a row reads a key position below the prefix
// from the tile as above, and position prefix + e from its path's node at depth e. Tiles that hold
// no tree position take the plain path unchanged.
#include <algorithm>

#include "common/check.hpp"
#include "common/convert.cuh"
#include "common/reduce.cuh"
#include "kernels/attention.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kTile = 32;        // keys per shared-memory tile: one per lane
constexpr int kRowsPerWarp = 4;  // query rows whose softmax state a warp keeps in registers
constexpr int kKPad = 4;         // floats of padding per K row in shared memory

struct Smem {
  float* k;   // [kTile][head_dim + kKPad]
  float* v;   // [kTile][head_dim]
  float* q;   // [rows per group][head_dim]
  float* p;   // [warps][kTile]
  float* tk;  // trees only: [tree_nodes][head_dim + kKPad], the tree's K rows
  float* tv;  // trees only: [tree_nodes][head_dim]
};

// tree_nodes: 0 for a plain step.
SPECDEC_HD constexpr std::size_t smem_floats(int head_dim, int warps, int tree_nodes) {
  return static_cast<std::size_t>(kTile) * (head_dim + kKPad) +
         static_cast<std::size_t>(kTile) * head_dim +
         static_cast<std::size_t>(warps) * kRowsPerWarp * head_dim +
         static_cast<std::size_t>(warps) * kTile +
         static_cast<std::size_t>(tree_nodes) * (2 * head_dim + kKPad);
}

// Copies head dimensions [d, d + 8) of cache row `key` (K and V) into shared-memory rows as f32;
// a key at or beyond `end` becomes zeros (never uninitialised cache memory: 0 * NaN would poison
// the sums).
template <class Cache>
SPECDEC_DEVICE void load_kv8(const Cache* k_head, const Cache* v_head, int key, int end, int hd,
                             int d, float* k_row, float* v_row) {
  float kv[8];
  float vv[8];
  if (key < end) {
    const Cache* kp = k_head + static_cast<std::size_t>(key) * hd + d;
    const Cache* vp = v_head + static_cast<std::size_t>(key) * hd + d;
    if constexpr (sizeof(Cache) == 2) {
      unpack8(*reinterpret_cast<const uint4*>(kp), kv, Cache{});
      unpack8(*reinterpret_cast<const uint4*>(vp), vv, Cache{});
    } else {
      const auto* k4 = reinterpret_cast<const float4*>(kp);
      const auto* v4 = reinterpret_cast<const float4*>(vp);
      const float4 k0 = k4[0], k1 = k4[1], v0 = v4[0], v1 = v4[1];
      kv[0] = k0.x, kv[1] = k0.y, kv[2] = k0.z, kv[3] = k0.w;
      kv[4] = k1.x, kv[5] = k1.y, kv[6] = k1.z, kv[7] = k1.w;
      vv[0] = v0.x, vv[1] = v0.y, vv[2] = v0.z, vv[3] = v0.w;
      vv[4] = v1.x, vv[5] = v1.y, vv[6] = v1.z, vv[7] = v1.w;
    }
  } else {
    SPECDEC_UNROLL
    for (int e = 0; e < 8; ++e) kv[e] = vv[e] = 0.0f;
  }
  auto* kd = reinterpret_cast<float4*>(k_row + d);
  auto* vd = reinterpret_cast<float4*>(v_row + d);
  kd[0] = make_float4(kv[0], kv[1], kv[2], kv[3]);
  kd[1] = make_float4(kv[4], kv[5], kv[6], kv[7]);
  vd[0] = make_float4(vv[0], vv[1], vv[2], vv[3]);
  vd[1] = make_float4(vv[4], vv[5], vv[6], vv[7]);
}

// Loads keys [tile0, tile0 + 32) of one KV head into shared memory (keys from `end` on: zeros).
template <class Cache>
SPECDEC_DEVICE void load_tile(const Cache* k_head, const Cache* v_head, int tile0, int end, int hd,
                              const Smem& s) {
  const int chunks_per_key = hd / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < kTile * chunks_per_key;
       idx += static_cast<int>(blockDim.x)) {
    const int j = idx / chunks_per_key;
    load_kv8(k_head, v_head, tile0 + j, end, hd, (idx % chunks_per_key) * 8, s.k + j * (hd + kKPad),
             s.v + j * hd);
  }
}

// Trees: loads the `nodes` tree nodes' K/V (slots prefix, prefix + 1, ...) into s.tk / s.tv.
template <class Cache>
SPECDEC_DEVICE void load_tree_nodes(const Cache* k_head, const Cache* v_head, int prefix, int nodes,
                                    int hd, const Smem& s) {
  const int chunks_per_key = hd / 8;
  for (int idx = static_cast<int>(threadIdx.x); idx < nodes * chunks_per_key;
       idx += static_cast<int>(blockDim.x)) {
    const int node = idx / chunks_per_key;
    load_kv8(k_head, v_head, prefix + node, prefix + nodes, hd, (idx % chunks_per_key) * 8,
             s.tk + node * (hd + kKPad), s.tv + node * hd);
  }
}

template <class Cache, int kDimsPerLane, bool kFinal, bool kTree>
__global__ void attention_kernel(AttentionParams p) {
  SPECDEC_DYNAMIC_SHARED(float, smem);
  const int hd = p.head_dim;
  const int warps = warps_per_block();
  const int warp = warp_id();
  const int lane = lane_id();
  float* const tree_smem =
      smem + kTile * (2 * hd + kKPad) + warps * kRowsPerWarp * hd + warps * kTile;
  const Smem s{smem,
               smem + kTile * (hd + kKPad),
               smem + kTile * (2 * hd + kKPad),
               smem + kTile * (2 * hd + kKPad) + warps * kRowsPerWarp * hd,
               tree_smem,
               tree_smem + p.tree_nodes * (hd + kKPad)};

  const int kv_head = static_cast<int>(blockIdx.x);
  const int split = static_cast<int>(blockIdx.y);
  const int group = p.n_heads / p.n_kv;
  const int start = *p.start;
  const int kv_len = start + p.n;
  const int key_begin = split * p.chunk;
  const int key_end = min_of(kv_len, key_begin + p.chunk);

  const auto* k_head =
      static_cast<const Cache*>(p.k_cache) + static_cast<std::size_t>(kv_head) * p.capacity * hd;
  const auto* v_head =
      static_cast<const Cache*>(p.v_cache) + static_cast<std::size_t>(kv_head) * p.capacity * hd;

  // Key positions from `prefix` on are a tree row's path (kTree); a plain step has none.
  const int prefix = kTree ? start - p.tree->first : kv_len;
  // The tree's nodes, read by the rows' paths (the barriers below order this before any use).
  // (At most the nodes the shared memory holds: the host promises first + n <= tree_nodes.)
  // A block whose keys all lie in the prefix reads no node.
  if constexpr (kTree) {
    if (key_end > prefix)
      load_tree_nodes(k_head, v_head, prefix, min_of(p.tree->first + p.n, p.tree_nodes), hd, s);
  }

  const int rows = p.n * group;
  const int rows_per_group = warps * kRowsPerWarp;
  for (int g0 = static_cast<int>(blockIdx.z) * rows_per_group; g0 < rows;
       g0 += static_cast<int>(gridDim.z) * rows_per_group) {
    const int rows_here = min_of(rows_per_group, rows - g0);
    __syncthreads();  // the previous group is done with s.q and the tiles
    for (int idx = static_cast<int>(threadIdx.x); idx < rows_here * hd;
         idx += static_cast<int>(blockDim.x)) {
      const int r = idx / hd;
      const int d = idx % hd;
      const int row = g0 + r;
      const int t = row / group;
      const int head = kv_head * group + row % group;
      s.q[r * hd + d] = p.q[(static_cast<std::size_t>(t) * p.n_heads + head) * hd + d];
    }

    float m[kRowsPerWarp];
    float l[kRowsPerWarp];  // per-lane partial sums of p
    float acc[kRowsPerWarp][kDimsPerLane];
    SPECDEC_UNROLL
    for (int k = 0; k < kRowsPerWarp; ++k) {
      m[k] = -INFINITY;
      l[k] = 0.0f;
      SPECDEC_UNROLL
      for (int i = 0; i < kDimsPerLane; ++i) acc[k][i] = 0.0f;
    }

    for (int tile0 = key_begin; tile0 < key_end; tile0 += kTile) {
      __syncthreads();  // the previous tile is consumed (and, the first time, s.q is written)
      load_tile(k_head, v_head, tile0, key_end, hd, s);
      __syncthreads();
      SPECDEC_UNROLL
      for (int k = 0; k < kRowsPerWarp; ++k) {
        const int r = warp + warps * k;
        if (r >= rows_here) continue;  // uniform over the warp
        const int t = (g0 + r) / group;
        // The last key position row t sees: its own (a tree row: prefix + its depth).
        const int last = kTree ? prefix + p.tree->depth[t] : start + t;
        const int key = tile0 + lane;
        const bool valid = key < key_end && key <= last;
        float score = -INFINITY;
        if (valid) {
          const float* qr = s.q + r * hd;
          const float* kr = s.k + lane * (hd + kKPad);
          if (kTree && key >= prefix) kr = s.tk + p.tree->ancestor[t][key - prefix] * (hd + kKPad);
          float dot = 0.0f;
          for (int d = 0; d < hd; d += 4) {
            const float4 qv = *reinterpret_cast<const float4*>(qr + d);
            const float4 kv = *reinterpret_cast<const float4*>(kr + d);
            dot = fmaf(qv.x, kv.x, dot);
            dot = fmaf(qv.y, kv.y, dot);
            dot = fmaf(qv.z, kv.z, dot);
            dot = fmaf(qv.w, kv.w, dot);
          }
          score = dot * p.scale;
        }
        const float m_new = fmaxf(m[k], warp_max(score));
        float prob = 0.0f;
        float correction = 1.0f;
        if (m_new != -INFINITY) {  // at least one valid key so far
          prob = valid ? expf(score - m_new) : 0.0f;
          correction = expf(m[k] - m_new);  // 0 when m was -inf
        }
        m[k] = m_new;
        l[k] = l[k] * correction + prob;
        float* pw = s.p + warp * kTile;
        pw[lane] = prob;
        __syncwarp();
        // A tile that holds tree positions reads them through the row's path: the plain
        // forward of the path would hold its nodes there, and zeros past the path's end.
        const bool through_path = kTree && tile0 + kTile > prefix;
        SPECDEC_UNROLL
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + kWarpSize * i;
          if (d < hd) {
            float a = acc[k][i] * correction;
            if (!through_path) {
              for (int j = 0; j < kTile; ++j) a = fmaf(pw[j], s.v[j * hd + d], a);
            } else {
              for (int j = 0; j < kTile; ++j) {
                const int pos = tile0 + j;
                const float v = pos < prefix ? s.v[j * hd + d]
                                : pos < key_end && pos <= last
                                    ? s.tv[p.tree->ancestor[t][pos - prefix] * hd + d]
                                    : 0.0f;
                a = fmaf(pw[j], v, a);
              }
            }
            acc[k][i] = a;
          }
        }
        __syncwarp();  // pw is rewritten by the next row
      }
    }

    SPECDEC_UNROLL
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int r = warp + warps * k;
      if (r >= rows_here) continue;
      const int row = g0 + r;
      const int t = row / group;
      const int head = kv_head * group + row % group;
      const float l_total = warp_sum(l[k]);
      const std::size_t out_row = static_cast<std::size_t>(t) * p.n_heads + head;
      if constexpr (kFinal) {
        const float inv = 1.0f / l_total;
        SPECDEC_UNROLL
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + kWarpSize * i;
          if (d < hd) p.out[out_row * hd + d] = acc[k][i] * inv;
        }
      } else {
        float* part =
            p.partial + (static_cast<std::size_t>(split) * p.n * p.n_heads + out_row) * (hd + 2);
        SPECDEC_UNROLL
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + kWarpSize * i;
          if (d < hd) part[d] = acc[k][i];
        }
        if (lane == 0) {
          part[hd] = m[k];
          part[hd + 1] = l_total;
        }
      }
    }
  }
}

// One warp per (token, head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void __launch_bounds__(kWarpSize) attention_combine_kernel(AttentionParams p) {
  const std::size_t row = blockIdx.x;  // t * n_heads + head
  const int hd = p.head_dim;
  const std::size_t rows = static_cast<std::size_t>(p.n) * p.n_heads;
  auto part = [&](int split) { return p.partial + (split * rows + row) * (hd + 2); };
  float max_m = -INFINITY;
  for (int sp = 0; sp < p.splits; ++sp) max_m = fmaxf(max_m, part(sp)[hd]);
  float denominator = 0.0f;
  for (int sp = 0; sp < p.splits; ++sp) {
    const float m = part(sp)[hd];
    if (m != -INFINITY) denominator += expf(m - max_m) * part(sp)[hd + 1];
  }
  const float inv = 1.0f / denominator;
  for (int d = lane_id(); d < hd; d += kWarpSize) {
    float sum = 0.0f;
    for (int sp = 0; sp < p.splits; ++sp) {
      const float m = part(sp)[hd];
      if (m != -INFINITY) sum += expf(m - max_m) * part(sp)[d];
    }
    p.out[row * hd + d] = sum * inv;
  }
}

template <class Cache, int kDimsPerLane, bool kTree>
void run(const AttentionParams& p, cudaStream_t stream, int warps) {
  // Decode and verify: one row block (every K/V tile is read once per KV head). Prefill: enough
  // row blocks for about 64 blocks per KV head.
  const int row_groups = ceil_div(p.n * (p.n_heads / p.n_kv), warps * kRowsPerWarp);
  const int row_blocks = p.n <= 16 ? 1 : min_of(row_groups, max_of(1, 64 / p.splits));
  const dim3 grid(static_cast<unsigned>(p.n_kv), static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(row_blocks));
  const dim3 block(static_cast<unsigned>(warps * kWarpSize));
  const std::size_t smem = smem_floats(p.head_dim, warps, kTree ? p.tree_nodes : 0) * sizeof(float);
  if (p.splits == 1) {
    auto* kernel = attention_kernel<Cache, kDimsPerLane, true, kTree>;
    if (smem > 48 * 1024) SPECDEC_CUDA_CHECK(set_max_dynamic_shared(kernel, smem));
    launch(kernel, grid, block, smem, stream, p);
  } else {
    auto* kernel = attention_kernel<Cache, kDimsPerLane, false, kTree>;
    if (smem > 48 * 1024) SPECDEC_CUDA_CHECK(set_max_dynamic_shared(kernel, smem));
    launch(kernel, grid, block, smem, stream, p);
    SPECDEC_CUDA_CHECK_LAUNCH("attention_kernel");
    launch(attention_combine_kernel, dim3(static_cast<unsigned>(p.n * p.n_heads)), dim3(kWarpSize),
           0, stream, p);
  }
}

}  // namespace

std::size_t attention_workspace_floats(int splits, int n, int n_heads, int head_dim) {
  return static_cast<std::size_t>(splits) * n * n_heads * (head_dim + 2);
}

int attention_chunk(int capacity, int n_kv, int multiprocessors) {
  const int blocks_per_head = max_of(1, ceil_div(2 * multiprocessors, max_of(1, n_kv)));
  const int chunk = ceil_div(ceil_div(max_of(1, capacity), blocks_per_head), kTile) * kTile;
  return max_of(128, chunk);
}

void attention(const AttentionParams& p, cudaStream_t stream, int warps) {
  if (p.n <= 0) return;
  if (p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > 256) {
    throw Error("attention: head_dim must be a multiple of 8 and at most 256");
  }
  if (p.n_kv <= 0 || p.n_heads % p.n_kv != 0) throw Error("attention: n_heads % n_kv != 0");
  if (p.chunk < kTile || p.chunk % kTile != 0)
    throw Error("attention: chunk must be a multiple of 32");
  if (p.splits < 1 || p.splits > 65535) throw Error("attention: splits must be in [1, 65535]");
  if (p.splits > 1 && p.partial == nullptr) throw Error("attention: splits > 1 needs a workspace");
  if (warps < 1 || warps > 32) throw Error("attention: warps must be in [1, 32]");
  if (p.tree != nullptr && (p.n > p.tree_nodes || p.tree_nodes > kMaxTreeNodes))
    throw Error("attention: a token tree step needs n <= tree_nodes <= 64");
  const bool half = p.kv_type == KvType::f16;
  const bool tree = p.tree != nullptr;
  if (p.head_dim <= 128) {
    if (tree)
      half ? run<__half, 4, true>(p, stream, warps) : run<float, 4, true>(p, stream, warps);
    else
      half ? run<__half, 4, false>(p, stream, warps) : run<float, 4, false>(p, stream, warps);
  } else {
    if (tree)
      half ? run<__half, 8, true>(p, stream, warps) : run<float, 8, true>(p, stream, warps);
    else
      half ? run<__half, 8, false>(p, stream, warps) : run<float, 8, false>(p, stream, warps);
  }
  SPECDEC_CUDA_CHECK_LAUNCH("attention_kernel");
}

}  // namespace specdec::cuda::kernels
