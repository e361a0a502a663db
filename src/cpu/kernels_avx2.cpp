// AVX2 kernels (with FMA and F16C). Compiled with -mavx2 -mfma -mf16c; called only after
// kernels.cpp checked the CPU. Each function reproduces the reduction order of its portable twin
// in kernels.cpp bit for bit (see kernels.hpp): the canonical 16 partial sums are kept as two
// 8-lane registers, lanes 0-7 and 8-15.
#include <immintrin.h>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

/// 16 accumulators as two halves.
struct Acc16 {
  __m256 lo, hi;
};

template <FmaWeights W>
inline void load_w16(const std::byte* row, std::size_t k, __m256& lo, __m256& hi) {
  if constexpr (W == FmaWeights::f32) {
    lo = _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
    hi = _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k + 8);
  } else {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k + 16));
    if constexpr (W == FmaWeights::f16) {
      lo = _mm256_cvtph_ps(h0);
      hi = _mm256_cvtph_ps(h1);
    } else {
      lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
      hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
    }
  }
}

/// Scalar weight as f32 (the same value the vector conversions give).
template <FmaWeights W>
inline float load_w1(const std::byte* row, std::size_t k) {
  if constexpr (W == FmaWeights::f32) {
    return reinterpret_cast<const float*>(row)[k];
  } else {
    const std::uint16_t h = reinterpret_cast<const std::uint16_t*>(row)[k];
    if constexpr (W == FmaWeights::f16) return _cvtsh_ss(h);
    const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
}

inline float reduce8(__m256 s8) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}
inline float reduce(const Acc16& a) { return reduce8(_mm256_add_ps(a.lo, a.hi)); }

// ---- fma matmul ---------------------------------------------------------------------------------

template <FmaWeights W, int R, int T>
inline void fma_block(const FmaArgs& a, std::size_t r0, std::size_t t0) {
  Acc16 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const std::byte* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.w + (r0 + r) * a.row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = a.x + (t0 + t) * a.cols;
  const std::size_t full = a.cols / 16 * 16;
  for (std::size_t k = 0; k < full; k += 16) {
    for (int r = 0; r < R; ++r) {
      __m256 wlo, whi;
      load_w16<W>(rows[r], k, wlo, whi);
      for (int t = 0; t < T; ++t) {
        acc[r][t].lo = _mm256_fmadd_ps(wlo, _mm256_loadu_ps(xs[t] + k), acc[r][t].lo);
        acc[r][t].hi = _mm256_fmadd_ps(whi, _mm256_loadu_ps(xs[t] + k + 8), acc[r][t].hi);
      }
    }
  }
  if (full < a.cols) {  // tail through zero-padded copies: lanes past the end add fma(0, 0, acc)
    alignas(32) float wbuf[16], xbuf[16];
    for (int r = 0; r < R; ++r) {
      for (std::size_t l = 0; l < 16; ++l)
        wbuf[l] = full + l < a.cols ? load_w1<W>(rows[r], full + l) : 0.0f;
      for (int t = 0; t < T; ++t) {
        for (std::size_t l = 0; l < 16; ++l) xbuf[l] = full + l < a.cols ? xs[t][full + l] : 0.0f;
        acc[r][t].lo = _mm256_fmadd_ps(_mm256_load_ps(wbuf), _mm256_load_ps(xbuf), acc[r][t].lo);
        acc[r][t].hi =
            _mm256_fmadd_ps(_mm256_load_ps(wbuf + 8), _mm256_load_ps(xbuf + 8), acc[r][t].hi);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r0 + r] = reduce(acc[r][t]);
}

template <FmaWeights W, int R>
inline void fma_rows(const FmaArgs& a, std::size_t r0) {
  std::size_t t0 = 0;
  for (; t0 + 2 <= a.n; t0 += 2) fma_block<W, R, 2>(a, r0, t0);
  if (t0 < a.n) fma_block<W, R, 1>(a, r0, t0);
}

template <FmaWeights W>
void fma_matmul(const FmaArgs& a) {
  std::size_t r = 0;
  for (; r + 2 <= a.rows; r += 2) fma_rows<W, 2>(a, r);
  for (; r < a.rows; ++r) fma_rows<W, 1>(a, r);
}

// ---- exp (same operations as exp_f32 in kernels.cpp) ------------------------------------------

inline __m256 exp8(__m256 x) {
  const __m256 xc =
      _mm256_min_ps(_mm256_set1_ps(exp_max_x), _mm256_max_ps(_mm256_set1_ps(exp_min_x), x));
  const __m256 magic = _mm256_set1_ps(exp_round_magic);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(exp_log2e), magic);
  const __m256 nf = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-exp_ln2_hi), xc);
  r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-exp_ln2_lo), r);
  __m256 p = _mm256_set1_ps(exp_p0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_p1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_p2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_p3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_p4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_p5));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
  __m256 result =
      _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(n, 23)));
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(),
                            _mm256_cmp_ps(x, _mm256_set1_ps(exp_min_x), _CMP_LT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/// 16 elements from `count - k` remaining (zero padded), as two halves.
inline void load16_padded(const void* base, bool f16, std::size_t k, std::size_t count, __m256& lo,
                          __m256& hi) {
  if (count - k >= 16) {
    if (f16) {
      const auto* h = static_cast<const std::uint16_t*>(base) + k;
      lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
      hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8)));
    } else {
      lo = _mm256_loadu_ps(static_cast<const float*>(base) + k);
      hi = _mm256_loadu_ps(static_cast<const float*>(base) + k + 8);
    }
    return;
  }
  alignas(32) float buf[16];
  for (std::size_t l = 0; l < 16; ++l) {
    if (k + l >= count)
      buf[l] = 0.0f;
    else
      buf[l] = f16 ? _cvtsh_ss(static_cast<const std::uint16_t*>(base)[k + l])
                   : static_cast<const float*>(base)[k + l];
  }
  lo = _mm256_load_ps(buf);
  hi = _mm256_load_ps(buf + 8);
}

inline float dot16(const float* a, const void* b, bool b_f16, std::size_t count) {
  Acc16 acc{_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (std::size_t k = 0; k < count; k += 16) {
    __m256 alo, ahi, blo, bhi;
    load16_padded(a, false, k, count, alo, ahi);
    load16_padded(b, b_f16, k, count, blo, bhi);
    acc.lo = _mm256_fmadd_ps(alo, blo, acc.lo);
    acc.hi = _mm256_fmadd_ps(ahi, bhi, acc.hi);
  }
  return reduce(acc);
}

}  // namespace

void fma_matmul_avx2(const FmaArgs& a) {
  switch (a.type) {
    case FmaWeights::f32:
      return fma_matmul<FmaWeights::f32>(a);
    case FmaWeights::f16:
      return fma_matmul<FmaWeights::f16>(a);
    case FmaWeights::bf16:
      return fma_matmul<FmaWeights::bf16>(a);
  }
}

namespace {

// ---- attention ----------------------------------------------------------------------------------
//
// The heads of a call share the K/V rows (AttentionArgs::heads). Scores and softmax go one head
// at a time; the V sums of several heads and blocks of 8 dimensions advance together, H x C
// independent chains of fused multiply-adds, each still in increasing position (one block of one
// head at a time was a single dependent chain, bound by the instruction's latency). A head's
// arithmetic is attend_portable's, operation for operation.

/// One head's scores, overwritten by their softmax numerators; returns their sum.
float attention_softmax(const AttentionArgs& a, const float* q, float* scores) {
  for (std::size_t j = 0; j < a.count; ++j)
    scores[j] = dot16(q, kv_row_data(a, a.k, j), a.kv_f16, a.head_dim) * a.scale;
  float max = scores[0];
  for (std::size_t j = 1; j < a.count; ++j) max = scores[j] > max ? scores[j] : max;
  const __m256 shift = _mm256_set1_ps(max);
  Acc16 sum{_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (std::size_t j = 0; j < a.count; j += 16) {
    __m256 slo, shi;
    load16_padded(scores, false, j, a.count, slo, shi);
    const __m256 elo = exp8(_mm256_sub_ps(slo, shift)), ehi = exp8(_mm256_sub_ps(shi, shift));
    alignas(32) float e[16];
    _mm256_store_ps(e, elo);
    _mm256_store_ps(e + 8, ehi);
    const std::size_t valid = a.count - j < 16 ? a.count - j : 16;
    for (std::size_t l = 0; l < 16; ++l) {
      if (l >= valid)
        e[l] = 0.0f;  // lanes past the end add 0
      else
        scores[j + l] = e[l];
    }
    sum.lo = _mm256_add_ps(sum.lo, _mm256_load_ps(e));
    sum.hi = _mm256_add_ps(sum.hi, _mm256_load_ps(e + 8));
  }
  return reduce(sum);
}

/// Heads h0 .. h0 + H - 1, dimensions d0 .. d0 + 8 C - 1 (whole blocks of 8): out = the
/// numerator-weighted sum of the V rows / total.
template <int C, int H>
void attention_values(const AttentionArgs& a, std::size_t h0, std::size_t d0, const float* total) {
  __m256 acc[H][C];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) acc[h][c] = _mm256_setzero_ps();
  const float* e = a.scores + h0 * a.count;
  for (std::size_t j = 0; j < a.count; ++j) {
    const std::size_t off = kv_row(a, j) * a.row_stride + d0;
    for (int c = 0; c < C; ++c) {
      const __m256 v = a.kv_f16 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                      static_cast<const std::uint16_t*>(a.v) + off + 8 * c)))
                                : _mm256_loadu_ps(static_cast<const float*>(a.v) + off + 8 * c);
      for (int h = 0; h < H; ++h)
        acc[h][c] = _mm256_fmadd_ps(_mm256_set1_ps(e[h * a.count + j]), v, acc[h][c]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c)
      _mm256_storeu_ps(a.out + (h0 + h) * a.head_dim + d0 + 8 * c,
                       _mm256_div_ps(acc[h][c], _mm256_set1_ps(total[h0 + h])));
}

/// attention_values over the heads in passes of 3 (12 accumulators of the 16 registers).
template <int C>
void attention_values_heads(const AttentionArgs& a, std::size_t d0, const float* total) {
  std::size_t h = 0;
  for (; h + 3 <= a.heads; h += 3) attention_values<C, 3>(a, h, d0, total);
  for (; h < a.heads; ++h) attention_values<C, 1>(a, h, d0, total);
}

}  // namespace

void attend_avx2(const AttentionArgs& a) {
  float total[kMaxAttentionHeads];
  for (std::size_t h = 0; h < a.heads; ++h)
    total[h] = attention_softmax(a, a.q + h * a.head_dim, a.scores + h * a.count);
  // Whole blocks of 8 dimensions, four at a time, then the rest.
  const std::size_t whole = a.head_dim / 8;
  std::size_t b = 0;
  for (; b + 4 <= whole; b += 4) attention_values_heads<4>(a, 8 * b, total);
  switch (whole - b) {
    case 3:
      attention_values_heads<3>(a, 8 * b, total);
      break;
    case 2:
      attention_values_heads<2>(a, 8 * b, total);
      break;
    case 1:
      attention_values_heads<1>(a, 8 * b, total);
      break;
    default:
      break;
  }
  const std::size_t d = 8 * whole;
  if (d == a.head_dim) return;
  // The last d < 8 dimensions, per head, through a zero-padded block.
  for (std::size_t h = 0; h < a.heads; ++h) {
    const float* e = a.scores + h * a.count;
    __m256 acc = _mm256_setzero_ps();
    for (std::size_t j = 0; j < a.count; ++j) {
      const std::size_t off = kv_row(a, j) * a.row_stride + d;
      alignas(32) float buf[8] = {};
      for (std::size_t l = 0; d + l < a.head_dim; ++l)
        buf[l] = a.kv_f16 ? _cvtsh_ss(static_cast<const std::uint16_t*>(a.v)[off + l])
                          : static_cast<const float*>(a.v)[off + l];
      acc = _mm256_fmadd_ps(_mm256_set1_ps(e[j]), _mm256_load_ps(buf), acc);
    }
    alignas(32) float res[8];
    _mm256_store_ps(res, _mm256_div_ps(acc, _mm256_set1_ps(total[h])));
    for (std::size_t l = 0; d + l < a.head_dim; ++l) a.out[h * a.head_dim + d + l] = res[l];
  }
}

void swiglu_avx2(const float* gate, const float* up, float* out, std::size_t count) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sign))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < count) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    for (std::size_t l = 0; i + l < count; ++l) {
      g[l] = gate[i + l];
      u[l] = up[i + l];
    }
    const __m256 gv = _mm256_load_ps(g);
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(_mm256_xor_ps(gv, sign))));
    _mm256_store_ps(o, _mm256_mul_ps(s, _mm256_load_ps(u)));
    for (std::size_t l = 0; i + l < count; ++l) out[i + l] = o[l];
  }
}

float sum_squares_avx2(const float* x, std::size_t count) { return dot16(x, x, false, count); }

void f32_to_f16_row_avx2(const float* in, std::uint16_t* out, std::size_t count) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < count; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

}  // namespace specdec::cpu::detail
