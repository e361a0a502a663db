// AVX-512 kernels (F, BW, VL, DQ). Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
// -mfma -mf16c; called only after kernels.cpp checked the CPU. Each function reproduces the
// reduction order of its portable twin in kernels.cpp bit for bit (see kernels.hpp).
#include <immintrin.h>

#include "kernels_avx512_reduce.hpp"
#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

// ---- loads: 16 weights as f32 -------------------------------------------------------------------

template <FmaWeights W>
inline __m512 load_w(const std::byte* row, std::size_t k) {
  if constexpr (W == FmaWeights::f32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    if constexpr (W == FmaWeights::f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

/// Lanes of `mask` loaded, the others 0.
template <FmaWeights W>
inline __m512 load_w_masked(const std::byte* row, std::size_t k, __mmask16 mask) {
  if constexpr (W == FmaWeights::f32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, row + 2 * k);
    if constexpr (W == FmaWeights::f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

inline __mmask16 tail_mask(std::size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

// ---- fma matmul ---------------------------------------------------------------------------------

/// R weight rows x T tokens, one 16-lane accumulator each.
template <FmaWeights W, int R, int T>
inline void fma_block(const FmaArgs& a, std::size_t r0, std::size_t t0) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const std::byte* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = a.w + (r0 + r) * a.row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = a.x + (t0 + t) * a.cols;
  const std::size_t full = a.cols / 16 * 16;
  for (std::size_t k = 0; k < full; k += 16) {
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(xs[t] + k);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_w<W>(rows[r], k);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (full < a.cols) {
    const __mmask16 mask = tail_mask(a.cols - full);
    __m512 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(mask, xs[t] + full);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = load_w_masked<W>(rows[r], full, mask);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r0 + r] = reduce(acc[r][t]);
}

template <FmaWeights W, int R>
inline void fma_rows(const FmaArgs& a, std::size_t r0) {
  // Token groups of 4 over the same R rows: the rows stay in L1/L2, memory sees them once.
  std::size_t t0 = 0;
  for (; t0 + 4 <= a.n; t0 += 4) fma_block<W, R, 4>(a, r0, t0);
  switch (a.n - t0) {
    case 3:
      fma_block<W, R, 3>(a, r0, t0);
      break;
    case 2:
      fma_block<W, R, 2>(a, r0, t0);
      break;
    case 1:
      fma_block<W, R, 1>(a, r0, t0);
      break;
    default:
      break;
  }
}

template <FmaWeights W>
void fma_matmul(const FmaArgs& a) {
  std::size_t r = 0;
  if (a.n == 1) {  // decode: 8 independent accumulation chains hide the fma latency
    for (; r + 8 <= a.rows; r += 8) fma_block<W, 8, 1>(a, r, 0);
  } else {
    for (; r + 4 <= a.rows; r += 4) fma_rows<W, 4>(a, r);
  }
  for (; r < a.rows; ++r) fma_rows<W, 1>(a, r);
}

// ---- exp (same operations as exp_f32 in kernels.cpp) ------------------------------------------

inline __m512 exp16(__m512 x) {
  const __m512 xc =
      _mm512_min_ps(_mm512_set1_ps(exp_max_x), _mm512_max_ps(_mm512_set1_ps(exp_min_x), x));
  const __m512 magic = _mm512_set1_ps(exp_round_magic);
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(exp_log2e), magic);
  const __m512 nf = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-exp_ln2_hi), xc);
  r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-exp_ln2_lo), r);
  __m512 p = _mm512_set1_ps(exp_p0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_p1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_p2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_p3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_p4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_p5));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
  const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
  __m512 result =
      _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), _mm512_slli_epi32(n, 23)));
  result = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_min_x), _CMP_LT_OQ),
                              _mm512_setzero_ps());
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

inline __m512 load_kv(const void* base, bool f16, std::size_t offset, __mmask16 mask) {
  if (f16)
    return _mm512_cvtph_ps(
        _mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(base) + offset));
  return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + offset);
}

inline float dot16(const float* a, const void* b, bool b_f16, std::size_t count) {
  __m512 acc = _mm512_setzero_ps();
  for (std::size_t k = 0; k < count; k += 16) {
    const __mmask16 mask = count - k >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(count - k);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + k), load_kv(b, b_f16, k, mask), acc);
  }
  return reduce(acc);
}

}  // namespace

void fma_matmul_avx512(const FmaArgs& a) {
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
// The heads of a group (AttentionArgs::heads) attend together: each K row is loaded and converted
// once and dotted with every head's q, each V row converted once per pass and added into several
// heads' accumulators. A head's arithmetic is attend_portable's, operation for operation: its
// score is the 16-lane dot of dot16 (blocks of 16 dimensions in order, then the fixed tree), its
// output dimension d the chain e_0 v_0[d] + e_1 v_1[d] + ... of fused multiply-adds in increasing
// position. The registers only change which independent chains run side by side: one head alone
// ran its V sum one block of 16 dimensions after the other, each a chain of `count` dependent
// multiply-adds (latency-bound: 4 cycles each), where B blocks x H heads of chains now advance
// together.

/// Scores of every head, s[h][j] = dot(q_h, k_j) * scale, with head_dim <= 16 B (`last`: the
/// lanes of the last block inside head_dim).
template <int B>
void attention_scores(const AttentionArgs& a, __mmask16 last) {
  for (std::size_t j = 0; j < a.count; ++j) {
    const std::size_t row = kv_row(a, j) * a.row_stride;
    __m512 k[B];
    for (int b = 0; b < B; ++b)
      k[b] =
          load_kv(a.k, a.kv_f16, row + 16 * b, b == B - 1 ? last : static_cast<__mmask16>(0xffff));
    for (std::size_t h = 0; h < a.heads; ++h) {
      const float* q = a.q + h * a.head_dim;
      __m512 acc = _mm512_setzero_ps();
      for (int b = 0; b < B; ++b)
        acc = _mm512_fmadd_ps(
            _mm512_maskz_loadu_ps(b == B - 1 ? last : static_cast<__mmask16>(0xffff), q + 16 * b),
            k[b], acc);
      a.scores[h * a.count + j] = reduce(acc) * a.scale;
    }
  }
}

/// The softmax numerators of one head's scores, in place (16 lanes, lane l takes j = l, l + 16,
/// ...); returns their sum (the fixed tree).
float attention_softmax(float* scores, std::size_t count) {
  __m512 vmax = _mm512_set1_ps(scores[0]);
  for (std::size_t j = 0; j < count; j += 16) {
    const __mmask16 mask = count - j >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(count - j);
    vmax = _mm512_mask_max_ps(vmax, mask, vmax, _mm512_maskz_loadu_ps(mask, scores + j));
  }
  const __m512 shift = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 sum = _mm512_setzero_ps();
  for (std::size_t j = 0; j < count; j += 16) {
    const __mmask16 mask = count - j >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(count - j);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, scores + j), shift));
    _mm512_mask_storeu_ps(scores + j, mask, e);
    sum = _mm512_mask_add_ps(sum, mask, sum, e);
  }
  return reduce(sum);
}

/// Heads h0 .. h0 + H - 1: out[h] = (sum over j of e_h[j] v_j) / total[h], the B blocks of every
/// head's output accumulated together (H x B chains, each in increasing j).
template <int B, int H>
void attention_values(const AttentionArgs& a, std::size_t h0, const float* total, __mmask16 last) {
  __m512 acc[H][B];
  for (int h = 0; h < H; ++h)
    for (int b = 0; b < B; ++b) acc[h][b] = _mm512_setzero_ps();
  const float* e = a.scores + h0 * a.count;
  for (std::size_t j = 0; j < a.count; ++j) {
    const std::size_t row = kv_row(a, j) * a.row_stride;
    for (int b = 0; b < B; ++b) {
      const __m512 v =
          load_kv(a.v, a.kv_f16, row + 16 * b, b == B - 1 ? last : static_cast<__mmask16>(0xffff));
      for (int h = 0; h < H; ++h)
        acc[h][b] = _mm512_fmadd_ps(_mm512_set1_ps(e[h * a.count + j]), v, acc[h][b]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int b = 0; b < B; ++b)
      _mm512_mask_storeu_ps(a.out + (h0 + h) * a.head_dim + 16 * b,
                            b == B - 1 ? last : static_cast<__mmask16>(0xffff),
                            _mm512_div_ps(acc[h][b], _mm512_set1_ps(total[h0 + h])));
}

/// head_dim in (16 (B - 1), 16 B]: the heads' scores, softmaxes, then their outputs in passes of
/// H heads (H x B accumulators fit the 32 registers with room for the V block and the weights).
template <int B>
void attend_blocks(const AttentionArgs& a) {
  constexpr int H = 24 / B > 8 ? 8 : (24 / B < 1 ? 1 : 24 / B);
  const std::size_t tail = a.head_dim - 16 * (B - 1);
  const __mmask16 last = tail >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(tail);
  attention_scores<B>(a, last);
  float total[kMaxAttentionHeads];
  for (std::size_t h = 0; h < a.heads; ++h)
    total[h] = attention_softmax(a.scores + h * a.count, a.count);
  std::size_t h = 0;
  for (; h + H <= a.heads; h += H) attention_values<B, H>(a, h, total, last);
  for (; h < a.heads; ++h) attention_values<B, 1>(a, h, total, last);
}

}  // namespace

void attend_avx512(const AttentionArgs& a) {
  const std::size_t blocks = (a.head_dim + 15) / 16;
  switch (blocks) {
    case 1:
      return attend_blocks<1>(a);
    case 2:
      return attend_blocks<2>(a);
    case 3:
      return attend_blocks<3>(a);
    case 4:
      return attend_blocks<4>(a);
    case 5:
      return attend_blocks<5>(a);
    case 6:
      return attend_blocks<6>(a);
    case 7:
      return attend_blocks<7>(a);
    case 8:
      return attend_blocks<8>(a);
    case 9:
      return attend_blocks<9>(a);
    case 10:
      return attend_blocks<10>(a);
    case 11:
      return attend_blocks<11>(a);
    case 12:
      return attend_blocks<12>(a);
    case 13:
      return attend_blocks<13>(a);
    case 14:
      return attend_blocks<14>(a);
    case 15:
      return attend_blocks<15>(a);
    case 16:
      return attend_blocks<16>(a);
    default:
      break;
  }
  // head_dim > 256: one head at a time, one block of dimensions at a time.
  for (std::size_t h = 0; h < a.heads; ++h) {
    const float* q = a.q + h * a.head_dim;
    float* scores = a.scores + h * a.count;
    for (std::size_t j = 0; j < a.count; ++j)
      scores[j] = dot16(q, kv_row_data(a, a.k, j), a.kv_f16, a.head_dim) * a.scale;
    const __m512 total = _mm512_set1_ps(attention_softmax(scores, a.count));
    float* out = a.out + h * a.head_dim;
    for (std::size_t d = 0; d < a.head_dim; d += 16) {
      const __mmask16 mask =
          a.head_dim - d >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(a.head_dim - d);
      __m512 acc = _mm512_setzero_ps();
      for (std::size_t j = 0; j < a.count; ++j)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(scores[j]),
                              load_kv(a.v, a.kv_f16, kv_row(a, j) * a.row_stride + d, mask), acc);
      _mm512_mask_storeu_ps(out + d, mask, _mm512_div_ps(acc, total));
    }
  }
}

void swiglu_avx512(const float* gate, const float* up, float* out, std::size_t count) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (std::size_t i = 0; i < count; i += 16) {
    const __mmask16 mask = count - i >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(count - i);
    const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, exp16(_mm512_xor_ps(g, sign))));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mask, up + i)));
  }
}

float sum_squares_avx512(const float* x, std::size_t count) { return dot16(x, x, false, count); }

namespace {

/// f32 -> bf16 bits in the low half of each lane, nearest even, NaN kept quiet (as f32_to_bf16).
inline __m512i to_bf16_bits(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  const __mmask16 nan = _mm512_cmp_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000), _MM_CMPINT_NLE);
  return _mm512_mask_mov_epi32(
      rounded, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
}

/// roundf(): nearest, halves away from zero.
inline __m512 round_half_away(__m512 r) {
  const __m512 t = _mm512_roundscale_ps(r, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(r, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one =
      _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(r, _mm512_set1_ps(-0.0f)));  // +-1
  return _mm512_mask_add_ps(t, up, t, one);
}

/// One block of 32 activations quantised as quantize_q8_0_block in kernels.cpp does it (d = amax
/// / 127, q = roundf(x / d), NaN -> 0): the 32 quants, and the scale rounded to f16 in `scale`.
inline __m256i quantize_q8_0_block(const float* xb, float& scale) {
  const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
  // max_ps returns its second operand when either is NaN: NaNs never reach amax.
  const __m512 m =
      _mm512_max_ps(_mm512_abs_ps(v0), _mm512_max_ps(_mm512_abs_ps(v1), _mm512_setzero_ps()));
  const float amax = _mm512_reduce_max_ps(m);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m128i q0 =
      _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v0, vid))));
  const __m128i q1 =
      _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(v1, vid))));
  scale = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
}

}  // namespace

void pack_q8_0_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t b0, std::size_t b1, std::int8_t* q8, float* scales,
                           std::int32_t* offsets) {
  const std::size_t blocks = cols / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t b = b0; b < b1; ++b) {
      const __m256i q = quantize_q8_0_block(x + t * ldx + b * 32, scales[t * blocks + b]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q8 + t * cols + b * 32), q);
      // sum(q) = sum(q + 128) - 32 * 128, the unsigned sum in four 64-bit lanes.
      const __m256i sums = _mm256_sad_epu8(_mm256_xor_si256(q, flip), _mm256_setzero_si256());
      const __m128i half =
          _mm_add_epi64(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
      const auto sum = static_cast<std::int32_t>(
          _mm_cvtsi128_si64(_mm_add_epi64(half, _mm_unpackhi_epi64(half, half))));
      offsets[t * blocks + b] = -128 * (sum - 32 * 128);
    }
}

void pack_q8_k_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t b0, std::size_t b1, std::int8_t* q8, float* scales,
                           std::int16_t* sums) {
  const std::size_t blocks = cols / 256;
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t b = b0; b < b1; ++b) {
      const float* xb = x + t * ldx + b * 256;
      // max_ps returns its second operand when either is NaN: NaNs never reach amax.
      __m512 m = _mm512_setzero_ps();
      for (int i = 0; i < 16; ++i)
        m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 16 * i)), m);
      const float d = _mm512_reduce_max_ps(m) / 127.0f;
      const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      scales[t * blocks + b] = d;
      std::int16_t* s = sums + (t * blocks + b) * q8_k_sums;
      for (int i = 0; i < 16; ++i) {
        // cvtt of a NaN gives INT_MIN, whose low byte (what cvtepi32_epi8 keeps) is 0.
        const __m512i q =
            _mm512_cvttps_epi32(round_half_away(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * i), id)));
        const __m128i bytes = _mm512_cvtepi32_epi8(q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + t * cols + b * 256 + 16 * i), bytes);
        s[i] = static_cast<std::int16_t>(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(bytes)));
      }
      for (int i = 0; i < 8; ++i) s[16 + i] = static_cast<std::int16_t>(s[2 * i] + s[2 * i + 1]);
    }
}

void pack_bf16_tiles_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t pairs,
                            std::size_t p0, std::size_t p1, std::uint32_t* out) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t c = t / 16,
                      tokens = n - 16 * c < 16 ? n - 16 * c : 16;  // a tile row: `tokens` dwords
    const __m512i scatter = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(static_cast<int>(tokens)));
    std::uint32_t* chunk = out + c * pairs * 16 + t % 16;
    const float* xt = x + t * ldx;
    for (std::size_t p = p0; p < p1; p += 16) {
      const __m256i lo = _mm512_cvtepi32_epi16(to_bf16_bits(_mm512_loadu_ps(xt + 2 * p)));
      const __m256i hi = _mm512_cvtepi32_epi16(to_bf16_bits(_mm512_loadu_ps(xt + 2 * p + 16)));
      const __m512i pair_words =
          _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // 16 (even, odd) pairs
      _mm512_i32scatter_epi32(chunk + p * tokens, scatter, pair_words, 4);
    }
  }
}

void pack_bf16_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t c0, std::size_t c1, std::uint16_t* out) {
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t k = c0; k < c1; k += 16) {
      const __mmask16 mask = c1 - k >= 16 ? static_cast<__mmask16>(0xffff) : tail_mask(c1 - k);
      const __m512i bits = to_bf16_bits(_mm512_maskz_loadu_ps(mask, x + t * ldx + k));
      _mm256_mask_storeu_epi16(out + t * cols + k, mask, _mm512_cvtepi32_epi16(bits));
    }
}

}  // namespace specdec::cpu::detail
