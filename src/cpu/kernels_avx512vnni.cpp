// AVX-512 kernels with the VNNI and BF16 extensions (vpdpbusd, vdpbf16ps), for AVX-512 machines
// without AMX. Compiled with the AVX-512 flags plus -mavx512vnni -mavx512bf16; kernels.cpp calls
// q8_matmul_avx512vnni only when cpu_features().avx512_vnni and bf16_matmul_avx512bf16 only when
// cpu_features().avx512_bf16 (a machine can have one without the other).
//
// Both read the weights in place from the memory map, 16 rows (Q8_0) or a few rows (BF16) at a
// time, and go through every token of a chunk of up to 16 while those rows are in L1/L2, so that
// memory sees each weight once per call for n <= 16.
#include <immintrin.h>

#include "kernels_avx512_reduce.hpp"
#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

/// Both kernels prefetch the rows they will read next with the T2 hint: with T0 the lines also
/// enter L1, where they evict the rows and activations in use (measured on Zen 4 with
/// specdec_bench_cpu_kernels BM_matmul_stream: decode 20-40% faster with T2 than with T0, and
/// BF16 decode with T0 was slower than without prefetching).
constexpr auto prefetch_hint = _MM_HINT_T2;

inline __mmask16 row_mask(std::size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

// ---- Q8_0 ---------------------------------------------------------------------------------------
//
// vpdpbusd multiplies unsigned by signed bytes. The weights are made unsigned: w ^ 0x80 == w + 128
// as u8, exact for every int8 including -128; then sum((w + 128) * x) = isum + 128 * sum(x), and
// the packing stored -128 * sum(x) per (token, block) as the accumulator's start value, so the
// dword that comes out is exactly isum_b, the same integer as the portable kernel's.
//
// A block of 16 rows is transposed once into 8 zmm, wt[j] lane i = row i's quants 4j..4j+3; each
// token then needs 8 vpdpbusd with its j-th quant dword broadcast, and lane i holds row i's isum:
// one cvt, one scale multiply and one fma give 16 rows' acc = fma(float(isum_b), d_w * d_x, acc),
// the documented Q8_0 order, per token per block.

/// The 32 quants at each of 16 row pointers, as u8 (w + 128), transposed: wt[j] lane i = quants
/// 4j..4j+3 of row i.
inline void load_transposed(const std::byte* const* q /* [16] */, __m512i wt[8]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // z[h + m] = [row 2h + m | row 2h + m + 4] for h in {0, 4}, m < 4: rows 0-7 in z[0..3], 8-15
  // in z[4..7], so that the lane order the last step produces is the row order.
  __m512i z[8];
  for (int h = 0; h < 8; h += 4)
    for (int m = 0; m < 4; ++m) {
      const int r = 2 * h + m;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r]));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r + 4]));
      z[h + m] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
    }
  // 4x4 dword transposes inside each 128-bit lane: c[k] lane L dword m = z[m] lane L dword k.
  __m512i c[2][4];
  for (int h = 0; h < 2; ++h) {
    const __m512i* s = z + 4 * h;
    const __m512i a0 = _mm512_unpacklo_epi32(s[0], s[1]), a1 = _mm512_unpackhi_epi32(s[0], s[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(s[2], s[3]), a3 = _mm512_unpackhi_epi32(s[2], s[3]);
    c[h][0] = _mm512_unpacklo_epi64(a0, a2);
    c[h][1] = _mm512_unpackhi_epi64(a0, a2);
    c[h][2] = _mm512_unpacklo_epi64(a1, a3);
    c[h][3] = _mm512_unpackhi_epi64(a1, a3);
  }
  // c[h][k] lanes: [rows 0-3 dword k, rows 0-3 dword k+4, rows 4-7 dword k, rows 4-7 dword k+4]
  // (rows 8-15 for h = 1); gather the dword-k lanes of both halves, then the dword-k+4 ones.
  for (int k = 0; k < 4; ++k) {
    wt[k] = _mm512_shuffle_i32x4(c[0][k], c[1][k], _MM_SHUFFLE(2, 0, 2, 0));
    wt[k + 4] = _mm512_shuffle_i32x4(c[0][k], c[1][k], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// Rows [r0, r0 + 16) (lanes past `valid` compute row r0's values and are not stored) against
/// the T tokens from t0.
template <int T>
void q8_group(const Q8RowsArgs& a, std::size_t r0, std::size_t valid, std::size_t t0) {
  const std::size_t blocks = a.cols / q8_block_elems;
  // Byte offsets of the 16 rows from row r0 (invalid lanes repeat row r0: always readable).
  alignas(64) int offsets[16];
  for (std::size_t i = 0; i < 16; ++i)
    offsets[i] = static_cast<int>((i < valid ? i : 0) * a.row_bytes);
  const __m512i offset_v = _mm512_load_si512(offsets);
  const std::byte* w0 = a.w + r0 * a.row_bytes;
  // While this group computes, the next one (when the range has it) is prefetched, so that
  // memory keeps streaming during the per-token work (see prefetch_hint).
  const bool prefetch_next = r0 + 32 <= a.rows;

  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const std::int8_t* xq[T];
  const float* xd[T];
  const std::int32_t* xo[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.xq + (t0 + t) * a.cols;
    xd[t] = a.xd + (t0 + t) * blocks;
    xo[t] = a.x_offsets + (t0 + t) * blocks;
  }
  const std::byte* q[16];
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::byte* block0 = w0 + b * q8_block_bytes;
    for (int i = 0; i < 16; ++i) q[i] = block0 + offsets[i] + 2;
    if (prefetch_next && b % 2 == 0)  // a 64-byte line holds about two blocks of a row
      for (std::size_t i = 16; i < 32; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(block0 + i * a.row_bytes), prefetch_hint);
    __m512i wt[8];
    load_transposed(q, wt);
    // The 16 rows' f16 scales: the low half of the dword at each block's start.
    const __m512i d_words = _mm512_i32gather_epi32(offset_v, block0, 1);
    const __m512 d_w = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d_words));
    for (int t = 0; t < T; ++t) {
      const std::int8_t* x = xq[t] + b * q8_block_elems;
      __m512i isum = _mm512_set1_epi32(xo[t][b]);
      for (int j = 0; j < 8; ++j) {
        int x4;
        __builtin_memcpy(&x4, x + 4 * j, 4);
        isum = _mm512_dpbusd_epi32(isum, wt[j], _mm512_set1_epi32(x4));
      }
      const __m512 scale = _mm512_mul_ps(d_w, _mm512_set1_ps(xd[t][b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[t]);
    }
  }
  const __mmask16 store = row_mask(valid);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(a.y + (t0 + t) * a.ldy + r0, store, acc[t]);
}

using Q8GroupFn = void (*)(const Q8RowsArgs&, std::size_t, std::size_t, std::size_t);
template <int... T>
struct Q8Groups {
  static constexpr Q8GroupFn table[sizeof...(T)] = {&q8_group<T + 1>...};
};
/// q8_group<m> for a chunk of m = 1..16 tokens (accumulators in registers).
constexpr const Q8GroupFn* q8_groups =
    Q8Groups<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>::table;

// ---- BF16 ---------------------------------------------------------------------------------------
//
// vdpbf16ps: each of 16 f32 lanes adds the two products of a (k, k+1) pair, so lane l of a
// (row, token) accumulator takes the pairs k = 2l + 32i, 2l + 1 + 32i in increasing i (bf16
// products are exact in f32; the hardware rounds each addition, flushes denormals), and the
// canonical 16-lane tree finishes it. Nothing depends on n, the row range or the thread.

inline __m512bh as_bf16(__m512i v) {
  __m512bh r;
  __builtin_memcpy(&r, &v, sizeof r);
  return r;
}

/// R weight rows x T tokens, one 16-lane accumulator each; Prefetch: also fetch the next R rows.
template <int R, int T, bool Prefetch>
inline void bf16_block(const Bf16RowsArgs& a, std::size_t r0, std::size_t t0) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const std::uint16_t* rows[R];
  for (int r = 0; r < R; ++r)
    rows[r] = reinterpret_cast<const std::uint16_t*>(a.w + (r0 + r) * a.row_bytes);
  // The next R rows (when the range has them; else these rows again, a no-op) are prefetched at
  // the same columns, so that memory streams while the token groups compute.
  [[maybe_unused]] const std::byte* next[R];
  for (int r = 0; r < R; ++r)
    next[r] = a.w + (r0 + r + (r0 + 2 * R <= a.rows ? R : 0)) * a.row_bytes;
  const std::uint16_t* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = a.xb + (t0 + t) * a.cols;
  const std::size_t full = a.cols / 32 * 32;
  for (std::size_t k = 0; k < full; k += 32) {
    __m512bh xv[T];
    for (int t = 0; t < T; ++t) xv[t] = as_bf16(_mm512_loadu_si512(xs[t] + k));
    for (int r = 0; r < R; ++r) {
      if constexpr (Prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(next[r] + 2 * k), prefetch_hint);
      const __m512bh wv = as_bf16(_mm512_loadu_si512(rows[r] + k));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  if (full < a.cols) {  // zero pairs past the end add +0 products
    const auto mask = static_cast<__mmask32>((1ull << (a.cols - full)) - 1u);
    __m512bh xv[T];
    for (int t = 0; t < T; ++t) xv[t] = as_bf16(_mm512_maskz_loadu_epi16(mask, xs[t] + full));
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = as_bf16(_mm512_maskz_loadu_epi16(mask, rows[r] + full));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, xv[t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.ldy + r0 + r] = reduce(acc[r][t]);
}

template <int R>
inline void bf16_rows(const Bf16RowsArgs& a, std::size_t r0) {
  // Token groups of 4 over the same R rows: the rows stay in L1/L2, memory sees them once.
  // The first group reads the rows from memory: it alone prefetches the next ones.
  std::size_t t0 = 0;
  if (a.n >= 4) bf16_block<R, 4, true>(a, r0, 0);
  for (t0 = a.n >= 4 ? 4 : 0; t0 + 4 <= a.n; t0 += 4) bf16_block<R, 4, false>(a, r0, t0);
  switch (a.n - t0) {
    case 3:
      t0 == 0 ? bf16_block<R, 3, true>(a, r0, t0) : bf16_block<R, 3, false>(a, r0, t0);
      break;
    case 2:
      t0 == 0 ? bf16_block<R, 2, true>(a, r0, t0) : bf16_block<R, 2, false>(a, r0, t0);
      break;
    case 1:
      t0 == 0 ? bf16_block<R, 1, true>(a, r0, t0) : bf16_block<R, 1, false>(a, r0, t0);
      break;
    default:
      break;
  }
}

}  // namespace

void q8_matmul_avx512vnni(const Q8RowsArgs& a) {
  for (std::size_t r0 = 0; r0 < a.rows; r0 += 16) {
    const std::size_t valid = a.rows - r0 < 16 ? a.rows - r0 : 16;
    for (std::size_t t0 = 0; t0 < a.n; t0 += 16) {
      const std::size_t m = a.n - t0 < 16 ? a.n - t0 : 16;
      q8_groups[m - 1](a, r0, valid, t0);
    }
  }
}

void bf16_matmul_avx512bf16(const Bf16RowsArgs& a) {
  std::size_t r = 0;
  if (a.n == 1) {  // decode: 8 independent accumulation chains hide the latency
    for (; r + 8 <= a.rows; r += 8) bf16_block<8, 1, true>(a, r, 0);
  } else {
    for (; r + 4 <= a.rows; r += 4) bf16_rows<4>(a, r);
  }
  for (; r < a.rows; ++r) bf16_rows<1>(a, r);
}

}  // namespace specdec::cpu::detail
