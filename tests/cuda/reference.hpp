#pragma once
// CPU references of the CUDA kernels, written for clarity (double accumulation, no tricks), from
// the definitions in the kernels' headers. Inputs are the exact values the device sees (weights
// are the model layer's dequantisation of the stored bytes), so differences are rounding of the
// kernels' f32 arithmetic only. gemm_exact_order is the exception: it reproduces the skinny
// GEMM's order of f32 operations, so that the tests can require bitwise equality.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/types.hpp"
#include "kernels/weight_layout.hpp"
#include "specdec/common.hpp"
#include "specdec/model/config.hpp"
#include "specdec/model/float16.hpp"

namespace specdec::test::ref {

/// 16-bit storage (F16 or BF16), bit patterns (uint16) on the host: the model layer's
/// conversions (round to nearest even).
inline std::uint16_t to_bits(float v, DType type) {
  return type == DType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
}
inline float from_bits(std::uint16_t bits, DType type) {
  return type == DType::f16 ? fp16_to_fp32(bits) : bf16_to_fp32(bits);
}
inline std::vector<std::uint16_t> to_bits(const std::vector<float>& v, DType type) {
  std::vector<std::uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bits(v[i], type);
  return out;
}
inline std::vector<float> from_bits(const std::vector<std::uint16_t>& v, DType type) {
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

/// y[t][r] in the skinny GEMM's exact order (skinny_gemm.hpp, weight_layout.hpp): 16 lane
/// partial sums, lane l accumulating with fused multiply-adds (from +0) the weights of pieces
/// l, l + 16, ... group by group (or, `elementwise`, the columns l, l + 16, ...), combined by the
/// butterfly tree of warp_sum_scatter: ((a0+a8) + (a4+a12)) + ((a2+a10) + (a6+a14)) + ... .
/// w: the dequantised weights [out][in].
inline std::vector<float> gemm_exact_order(DType type, const std::vector<float>& w,
                                           const std::vector<float>& x, int n, int out, int in,
                                           bool elementwise) {
  constexpr int kLanes = cuda::kSkinnyLanesPerRow;
  const cuda::PieceLayout layout = cuda::piece_layout(type);
  const int pieces = in / layout.block_elems * layout.pieces;
  std::vector<float> y(static_cast<std::size_t>(n) * out);
  for (int t = 0; t < n; ++t) {
    const float* xt = x.data() + static_cast<std::size_t>(t) * in;
    for (int r = 0; r < out; ++r) {
      const float* wr = w.data() + static_cast<std::size_t>(r) * in;
      float a[kLanes] = {};
      for (int l = 0; l < kLanes; ++l) {
        if (elementwise) {
          for (int k = l; k < in; k += kLanes) a[l] = std::fma(wr[k], xt[k], a[l]);
          continue;
        }
        for (int p = l; p < pieces; p += kLanes) {
          const int block = p / layout.pieces, in_block = p % layout.pieces;
          for (int g = 0; g < layout.groups; ++g) {
            const int col = block * layout.block_elems + cuda::group_column(type, in_block, g);
            for (int i = 0; i < 8; ++i) a[l] = std::fma(wr[col + i], xt[col + i], a[l]);
          }
        }
      }
      for (int width = kLanes / 2; width >= 1; width /= 2) {
        for (int l = 0; l < width; ++l) a[l] = a[l] + a[l + width];
      }
      y[static_cast<std::size_t>(t) * out + r] = a[0];
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
