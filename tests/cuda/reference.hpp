#pragma once
// CPU references of the CUDA kernels, written for clarity (double accumulation, no tricks), from
// the definitions in the kernels' headers. Inputs are the exact values the device sees (16-bit
// weights are converted from their stored bits), so differences are rounding of the kernels'
// f32 arithmetic only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/types.hpp"
#include "specdec/common.hpp"
#include "specdec/model/config.hpp"

namespace specdec::test::ref {

/// 16-bit storage of the given type, bit patterns (uint16) on the host.
inline std::uint16_t to_bits(float v, cuda::WeightType type) {
  std::uint16_t bits = 0;
  if (type == cuda::WeightType::f16) {
    const __half h = __float2half_rn(v);
    std::memcpy(&bits, &h, 2);
  } else {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&bits, &h, 2);
  }
  return bits;
}
inline float from_bits(std::uint16_t bits, cuda::WeightType type) {
  if (type == cuda::WeightType::f16) {
    __half h;
    std::memcpy(static_cast<void*>(&h), &bits, 2);
    return __half2float(h);
  }
  __nv_bfloat16 h;
  std::memcpy(static_cast<void*>(&h), &bits, 2);
  return __bfloat162float(h);
}
inline std::vector<std::uint16_t> to_bits(const std::vector<float>& v, cuda::WeightType type) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bits(v[i], type);
  return out;
}
inline std::vector<float> from_bits(const std::vector<std::uint16_t>& v, cuda::WeightType type) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_bits(v[i], type);
  return out;
}

/// y[t][r] = sum_k w[r][k] x[t][k].
inline std::vector<float> gemm_xwT(const std::vector<float>& w, const std::vector<float>& x, int n,
                                   int out, int in) {
  std::vector<float> y(static_cast<std::size_t>(n) * out);
  for (int t = 0; t < n; ++t) {
    for (int r = 0; r < out; ++r) {
      double s = 0.0;
      for (int k = 0; k < in; ++k) {
        s += double{w[static_cast<std::size_t>(r) * in + k]} *
             x[static_cast<std::size_t>(t) * in + k];
      }
      y[static_cast<std::size_t>(t) * out + r] = static_cast<float>(s);
    }
  }
  return y;
}

/// h += delta (if any); out = h / sqrt(mean(h^2) + eps) * weight, per row.
inline void rmsnorm_residual(std::vector<float>& h, const std::vector<float>* delta,
                             const std::vector<float>& weight, float eps, int n, int dim,
                             std::vector<float>& out) {
  out.assign(static_cast<std::size_t>(n) * dim, 0.0f);
  for (int t = 0; t < n; ++t) {
    double sum_sq = 0.0;
    for (int i = 0; i < dim; ++i) {
      float& v = h[static_cast<std::size_t>(t) * dim + i];
      if (delta != nullptr) v += (*delta)[static_cast<std::size_t>(t) * dim + i];
      sum_sq += double{v} * v;
    }
    const double inv = 1.0 / std::sqrt(sum_sq / dim + eps);
    for (int i = 0; i < dim; ++i) {
      out[static_cast<std::size_t>(t) * dim + i] =
          static_cast<float>(h[static_cast<std::size_t>(t) * dim + i] * inv * weight[i]);
    }
  }
}

/// Rotates one head in place (pairs per `layout`) by angle position * inv_freq[i].
inline void rope_head(float* x, int hd, int position, const std::vector<float>& inv_freq,
                      RopeLayout layout) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const int ia = layout == RopeLayout::adjacent_pairs ? 2 * i : i;
    const int ib = layout == RopeLayout::adjacent_pairs ? 2 * i + 1 : i + half;
    const double angle = static_cast<double>(static_cast<float>(position) * inv_freq[i]);
    const double a = x[ia];
    const double b = x[ib];
    x[ia] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
    x[ib] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
  }
}

/// RMSNorm of one head in place.
inline void norm_head(float* x, int hd, const std::vector<float>& w, float eps) {
  double sum_sq = 0.0;
  for (int d = 0; d < hd; ++d) sum_sq += double{x[d]} * x[d];
  const double inv = 1.0 / std::sqrt(sum_sq / hd + eps);
  for (int d = 0; d < hd; ++d) x[d] = static_cast<float>(x[d] * inv * w[d]);
}

inline float silu_mul(float g, float u) {
  return static_cast<float>(g / (1.0 + std::exp(-double{g})) * u);
}

/// Causal GQA attention of n new tokens at positions start .. start + n - 1 over a cache holding
/// positions 0 .. start + n - 1. q: [n][n_heads][hd]; k, v: [n_kv][capacity][hd] (as f32).
inline std::vector<float> attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int n, int n_heads, int n_kv,
                                    int hd, int capacity, int start, float scale) {
  const int group = n_heads / n_kv;
  std::vector<float> out(static_cast<std::size_t>(n) * n_heads * hd);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      const int kvh = h / group;
      const float* qr = q.data() + (static_cast<std::size_t>(t) * n_heads + h) * hd;
      const int keys = start + t + 1;
      std::vector<double> s(static_cast<std::size_t>(keys));
      double m = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < keys; ++j) {
        const float* kr = k.data() + (static_cast<std::size_t>(kvh) * capacity + j) * hd;
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) dot += double{qr[d]} * kr[d];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      double l = 0.0;
      for (auto& e : s) l += (e = std::exp(e - m));
      for (int d = 0; d < hd; ++d) {
        double acc = 0.0;
        for (int j = 0; j < keys; ++j)
          acc += s[j] * v[(static_cast<std::size_t>(kvh) * capacity + j) * hd + d];
        out[(static_cast<std::size_t>(t) * n_heads + h) * hd + d] = static_cast<float>(acc / l);
      }
    }
  }
  return out;
}

}  // namespace specdec::test::ref
