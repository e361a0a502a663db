// The 256-bit side of kernels_quant_vnni.hpp: the rows16 layout read as two halves of 8 rows,
// and the vector operations of a ymm register, shared by the two kernels that read the layout on
// Isa::avx2: the AVX-VNNI one (kernels_quant_avxvnni.cpp, vpdpbusd) and the AVX2 one of CPUs
// without VNNI (kernels_quant_avx2_rows16.cpp, vpmaddubsw + vpmaddwd). Each includes this header
// and compiles its own copy with its own flags; they differ only in the multiply-adds.
//
// Each 64-byte register of the rows16 layout (dword i of rows 0..15) is two of ours, rows 0-7
// then rows 8-15, so a group of 16 rows is computed as two halves of 8, one after the other over
// the whole row. The second half reads the lines the first one brought in (a group of 16 rows is
// 14-120 KiB on the Qwen files, in L2), so memory streams each weight once. What differs from the
// AVX-512 kernel is only what AVX2 lacks: masked stores and adds (vector masks instead),
// vpternlog (and / or), vpmovdw (a byte shuffle), embedded broadcasts (the multiply-adds take a
// broadcast register), and 16 vector registers instead of 32 (fewer tokens per pass).
#pragma once

#include <immintrin.h>

#include "kernels_quant_vnni.hpp"

namespace specdec::cpu::detail {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces)

/// Broadcast of the 4 int8 (or 2 int16) at p.
inline __m256i bcast32(const void* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// Half h (rows 8h .. 8h + 7) of one block of a group of 16 rows in the rows16 layout: p is the
/// block's start (16 x block_bytes). A field of 4k bytes is k registers of 64 bytes, ours the
/// 32 at 32h; a 2-byte field is the 16 rows' values in order, ours the 16 bytes at 16h.
struct Half {
  static constexpr bool transposes = false;
  const std::byte* p;
  int h;
  StreamAhead ahead;  ///< the stream's lines to prefetch meanwhile (first half, first pass only)

  void prefetch(std::size_t part, std::size_t parts) const { ahead.part(part, parts); }

  template <int N>
  [[gnu::always_inline]] void load(std::size_t off, __m256i out[N]) const {
    for (int i = 0; i < N; ++i)
      out[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * off + 64 * i + 32 * h));
  }
  [[nodiscard]] __m256i load1(std::size_t off) const {
    __m256i v;
    load<1>(off, &v);
    return v;
  }
  template <std::size_t Bytes>
  [[nodiscard]] __m256 load_half(std::size_t off) const {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * off + 16 * h)));
  }
};

/// The 8 rows of a half group: where its blocks are, and its prefetch.
struct HalfGroup {
  const std::byte* g;  ///< the group's row 0
  std::size_t bytes;   ///< block bytes
  const std::byte* end;
  int h;

  /// Block b; with `stream`, the first half carries the lines ahead of it to prefetch (the
  /// second finds them in cache).
  [[nodiscard]] Half block(std::size_t b, bool stream) const {
    return {g + 16 * b * bytes, h,
            stream && h == 0 ? StreamAhead::of_block(g, bytes, end, b) : StreamAhead{}};
  }
};

/// The vector operations of kernels_quant_vnni.hpp at 256 bits, all but the two multiply-adds:
/// V256Vnni (kernels_quant_avxvnni.cpp) adds them as AVX-VNNI instructions, V256Madd
/// (kernels_quant_avx2_rows16.cpp) as AVX2 sequences.
struct V256Ops {
  using I = __m256i;
  using F = __m256;
  using Mask = __m256i;  ///< lane r all ones: stored
  static constexpr int lanes = 8;
  // 16 registers: 4 accumulators of blocks of 32 beside their 8 weight registers, 4 tokens' sums
  // and dots of super-blocks, 4 tokens of a fused super-block (Q4_K: 2 with both nibbles' chains).
  static constexpr std::size_t tokens32 = 4, tokens_k = 4, fused_k = 4;
  static constexpr int paired_q4_k = 2;

  static I zero() { return _mm256_setzero_si256(); }
  static I splat8(unsigned char v) { return _mm256_set1_epi8(static_cast<char>(v)); }
  static I set1_16(short v) { return _mm256_set1_epi16(v); }
  static I set1_32(int v) { return _mm256_set1_epi32(v); }
  static I lane_pattern(int c0, int c1, int c2, int c3) {
    return _mm256_set_epi32(c3, c2, c1, c0, c3, c2, c1, c0);
  }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  /// (a & c) | b, for b already holding only bits outside c.
  static I merge(I a, I b, I c) { return _mm256_or_si256(_mm256_and_si256(a, c), b); }
  static I srli16(I v, int n) { return _mm256_srli_epi16(v, n); }
  static I slli16(I v, int n) { return _mm256_slli_epi16(v, n); }
  static I srli32(I v, int n) { return _mm256_srli_epi32(v, n); }
  static I slli32(I v, int n) { return _mm256_slli_epi32(v, n); }
  static I srai16(I v, int n) { return _mm256_srai_epi16(v, n); }
  static I srai32(I v, int n) { return _mm256_srai_epi32(v, n); }
  static I add8(I a, I b) { return _mm256_add_epi8(a, b); }
  static I sub8(I a, I b) { return _mm256_sub_epi8(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo16(I a, I b) { return _mm256_mullo_epi16(a, b); }
  static I mullo32(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I shuffle8(I table, I idx) { return _mm256_shuffle_epi8(table, idx); }
  static I add8_where(I w, I all, I bit, I v) {
    const I set = _mm256_cmpeq_epi8(_mm256_and_si256(all, bit), bit);
    return _mm256_add_epi8(w, _mm256_and_si256(set, v));
  }
  /// The 16-entry table of IQ4_NL / IQ4_XS values + 128, in both 128-bit lanes (for vpshufb).
  static I iq4_table() {
    return _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8)));
  }
  static F zero_ps() { return _mm256_setzero_ps(); }
  /// Binary16 values in the low half of each lane, as floats: the low halves gathered into the
  /// low 8 bytes of each 128-bit lane, the two quadwords joined, converted.
  static F half_lo(I v) {
    const I low_halves = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    const I packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, low_halves), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
  }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F set1_ps(float v) { return _mm256_set1_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F negate(F v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }
  static F load_ps(const float* p) { return _mm256_load_ps(p); }
  static void store_ps(float* p, F v) { _mm256_store_ps(p, v); }
  static void store(float* y, Mask m, F v) { _mm256_maskstore_ps(y, m, v); }

  /// Calls f(half group, lanes to store, y of its lane 0) for each half of each group of 16 rows
  /// of the call that holds rows of its range (the rows16 layout only).
  template <class Fn>
  static void for_each_group(const QuantArgs& a, std::size_t block_bytes, Fn&& f) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for_each_rows16_group(
        a, [&](const std::byte* g, std::size_t lo, std::size_t hi, float* y, const std::byte* end) {
          for (int h = 0; h < 2; ++h) {
            const int first = static_cast<int>(lo) - 8 * h, last = static_cast<int>(hi) - 8 * h;
            if (last <= 0 || first >= 8) continue;
            // Lane r is stored when first <= r < last.
            const __m256i store =
                _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(first), lane),
                                    _mm256_cmpgt_epi32(_mm256_set1_epi32(last), lane));
            HalfGroup half{g, block_bytes, end, h};
            f(half, store, y + 8 * static_cast<std::size_t>(h));
          }
        });
  }
};

}  // namespace
}  // namespace specdec::cpu::detail
