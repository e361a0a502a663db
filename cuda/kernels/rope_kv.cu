// Rotary embedding fused into the KV-cache write (see rope_kv.hpp). One warp per (token, head):
// lane l handles the rotary pairs l, l + 32, ...; the Qwen3 head norm needs one warp sum. The
// angle is float(position) * inv_freq[i] as in the CPU backend (and Hugging Face), with
// sincosf (precise, not the __sinf approximation).
#include "common/check.hpp"
#include "common/convert.cuh"
#include "common/reduce.cuh"
#include "kernels/rope_kv.hpp"

namespace specdec::cuda::kernels {

namespace {

template <class Cache>
__global__ void __launch_bounds__(kWarpSize) rope_kv_kernel(RopeKvParams p) {
  const int t = static_cast<int>(blockIdx.x);
  const int head = static_cast<int>(blockIdx.y);  // q heads, then k heads, then v heads
  const int lane = lane_id();
  const int hd = p.head_dim;
  const int half = hd / 2;
  const int width = (p.n_heads + 2 * p.n_kv) * hd;
  const float* x = p.qkv + static_cast<std::size_t>(t) * width + head * hd;
  const float* bias = p.bias != nullptr ? p.bias + head * hd : nullptr;
  const int slot = *p.start + t;  // where its K/V go
  const int position =            // its rotary position
      p.tree == nullptr ? slot : *p.start - p.tree->first + p.tree->depth[t];

  auto load = [&](int d) { return bias != nullptr ? x[d] + bias[d] : x[d]; };

  const bool is_q = head < p.n_heads;
  const bool is_k = !is_q && head < p.n_heads + p.n_kv;
  if (!is_q && !is_k) {  // a v head: copy into the cache
    const int kv_head = head - p.n_heads - p.n_kv;
    Cache* dst = static_cast<Cache*>(p.v_cache) +
                 (static_cast<std::size_t>(kv_head) * p.capacity + slot) * hd;
    for (int d = lane; d < hd; d += kWarpSize) dst[d] = from_float<Cache>(load(d));
    return;
  }

  // Qwen3: RMSNorm over the head before the rotation, y = (x * (1 / rms)) * w.
  const float* norm = is_q ? p.q_norm : p.k_norm;
  float inv_rms = 1.0f;
  if (norm != nullptr) {
    float sum_sq = 0.0f;
    for (int d = lane; d < hd; d += kWarpSize) {
      const float v = load(d);
      sum_sq = fmaf(v, v, sum_sq);
    }
    sum_sq = warp_sum(sum_sq);
    inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(hd) + p.norm_eps);
  }
  auto normed = [&](int d) { return norm != nullptr ? (load(d) * inv_rms) * norm[d] : load(d); };

  const bool adjacent = p.layout == RopeLayout::adjacent_pairs;
  float* q_dst = nullptr;
  Cache* k_dst = nullptr;
  if (is_q) {
    q_dst = p.q_out + (static_cast<std::size_t>(t) * p.n_heads + head) * hd;
  } else {
    const int kv_head = head - p.n_heads;
    k_dst = static_cast<Cache*>(p.k_cache) +
            (static_cast<std::size_t>(kv_head) * p.capacity + slot) * hd;
  }
  for (int i = lane; i < half; i += kWarpSize) {
    const int ia = adjacent ? 2 * i : i;
    const int ib = adjacent ? 2 * i + 1 : i + half;
    const float a = normed(ia);
    const float b = normed(ib);
    const float angle = static_cast<float>(position) * p.inv_freq[i];
    float s;
    float c;
    sincosf(angle, &s, &c);
    const float ra = a * c - b * s;
    const float rb = b * c + a * s;
    if (is_q) {
      q_dst[ia] = ra;
      q_dst[ib] = rb;
    } else {
      k_dst[ia] = from_float<Cache>(ra);
      k_dst[ib] = from_float<Cache>(rb);
    }
  }
}

}  // namespace

void rope_kv_write(const RopeKvParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0) throw Error("rope_kv_write: head_dim must be even");
  const dim3 grid(static_cast<unsigned>(p.n), static_cast<unsigned>(p.n_heads + 2 * p.n_kv));
  if (p.kv_type == KvType::f16) {
    launch(rope_kv_kernel<__half>, grid, dim3(kWarpSize), 0, stream, p);
  } else {
    launch(rope_kv_kernel<float>, grid, dim3(kWarpSize), 0, stream, p);
  }
  SPECDEC_CUDA_CHECK_LAUNCH("rope_kv_kernel");
}

}  // namespace specdec::cuda::kernels
