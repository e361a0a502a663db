// AVX-512 kernels with the BF16 extension (vdpbf16ps), for AVX-512 machines without AMX.
// Compiled with the AVX-512 flags plus -mavx512vnni -mavx512bf16; kernels.cpp calls
// bf16_matmul_avx512bf16 only when cpu_features().avx512_bf16. (The integer kernels of the
// quantised types, Q8_0 included, are in kernels_quant_avx512vnni.cpp.)
//
// It reads the weights in place from the memory map, a few rows at a time, and goes through
// every token of a chunk of up to 16 while those rows are in L1/L2, so that memory sees each
// weight once per call for n <= 16.
#include <immintrin.h>

#include "kernels_avx512_reduce.hpp"
#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

/// The kernel prefetches the rows it will read next with the T2 hint: with T0 the lines also
/// enter L1, where they evict the rows and activations in use (measured on Zen 4 with
/// specdec_bench_cpu_kernels BM_matmul_stream: decode 20-40% faster with T2 than with T0, and
/// BF16 decode with T0 was slower than without prefetching).
constexpr auto prefetch_hint = _MM_HINT_T2;

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
