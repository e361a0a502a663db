// The 512-bit side of kernels_quant_vnni.hpp: groups of 16 rows in the lanes of a zmm register,
// read from the rows16 layout (loaded ready) or the file's layout (each block's bytes transposed,
// or gathered, into the same registers on every call), and the vector operations of a zmm
// register, shared by the two AVX-512 kernels: the AVX512-VNNI one (kernels_quant_avx512vnni.cpp,
// vpdpbusd) and the one of AVX-512 CPUs without VNNI (kernels_quant_avx512_rows16.cpp,
// vpmaddubsw + vpmaddwd). Each includes this header and compiles its own copy with its own flags;
// they differ only in the multiply-adds.
#pragma once

#include <immintrin.h>

#include "kernels_quant_vnni.hpp"

namespace specdec::cpu::detail {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces)

inline __mmask16 row_mask(std::size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

/// Broadcast of the 4 int8 (or 2 int16) at p.
inline __m512i bcast32(const void* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// Binary16 values in the low half of each lane, as floats.
inline __m512 half_lo(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }
inline __m512 half_hi(__m512i v) { return half_lo(_mm512_srli_epi32(v, 16)); }

/// 32 bytes at q[r] + off for 16 rows r, transposed: out[i] lane r = bytes 4i..4i+3 of row r.
[[gnu::always_inline]] inline void transpose_16x32(const std::byte* const* q, std::size_t off,
                                                   __m512i out[8]) {
  // z[h + m] = [row 2h + m | row 2h + m + 4] for h in {0, 4}, m < 4: rows 0-7 in z[0..3], 8-15
  // in z[4..7], so that the lane order the last step produces is the row order.
  __m512i z[8];
  for (int h = 0; h < 8; h += 4)
    for (int m = 0; m < 4; ++m) {
      const int r = 2 * h + m;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + off));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r + 4] + off));
      z[h + m] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
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
    out[k] = _mm512_shuffle_i32x4(c[0][k], c[1][k], _MM_SHUFFLE(2, 0, 2, 0));
    out[k + 4] = _mm512_shuffle_i32x4(c[0][k], c[1][k], _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// 16 bytes at q[r] + off for 16 rows r, transposed: out[i] lane r = bytes 4i..4i+3 of row r.
[[gnu::always_inline]] inline void transpose_16x16(const std::byte* const* q, std::size_t off,
                                                   __m512i out[4]) {
  // z[k] 128-bit lane L = row k + 4L; a 4x4 dword transpose inside each lane then puts dword i
  // of row 4L + k in lane 4L + k of out[i].
  __m512i z[4];
  for (int k = 0; k < 4; ++k) {
    __m512i v =
        _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q[k] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[k + 4] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[k + 8] + off)), 2);
    z[k] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[k + 12] + off)),
                              3);
  }
  const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(a0, a2);
  out[1] = _mm512_unpackhi_epi64(a0, a2);
  out[2] = _mm512_unpacklo_epi64(a1, a3);
  out[3] = _mm512_unpackhi_epi64(a1, a3);
}

/// One block of 16 rows in the file's layout: the rows' pointers to the block (and the same as
/// lane offsets from row 0's, for gathers); every read transposes or gathers.
struct Rows {
  static constexpr bool transposes = true;
  const std::byte* p[16];
  __m512i offsets;

  /// N = 8 or 4: a transpose; N = 3 (needs off >= 4; the 16 bytes from off - 4 stay in the
  /// block): the last three of a 16-byte transpose; N = 1: a gather.
  template <int N>
  [[gnu::always_inline]] void load(std::size_t off, __m512i out[N]) const {
    if constexpr (N == 8) {
      transpose_16x32(p, off, out);
    } else if constexpr (N == 4) {
      transpose_16x16(p, off, out);
    } else if constexpr (N == 3) {
      __m512i r[4];
      transpose_16x16(p, off - 4, r);
      for (int i = 0; i < 3; ++i) out[i] = r[i + 1];
    } else {
      static_assert(N == 1);
      out[0] = load1(off);
    }
  }
  [[nodiscard]] __m512i load1(std::size_t off) const {
    return _mm512_i32gather_epi32(offsets, p[0] + off, 1);
  }
  /// Nothing: FileGroup::block prefetches the rows' next lines itself (RowPrefetcher).
  void prefetch(std::size_t /*part*/, std::size_t /*parts*/) const {}
  /// The binary16 field at `off` as 16 floats: the dword from off gathered, or at the block's
  /// end (off + 4 > Bytes) the one ending at off + 2.
  template <std::size_t Bytes>
  [[nodiscard]] __m512 load_half(std::size_t off) const {
    return off + 4 <= Bytes ? half_lo(load1(off)) : half_hi(load1(off - 2));
  }
};

/// One block of 16 rows in the rows16 layout (kernels_impl.hpp), p its start: the same registers
/// as Rows', already in memory, so every read is a load.
struct Packed16 {
  static constexpr bool transposes = false;
  const std::byte* p;
  StreamAhead ahead;  ///< the stream's lines to prefetch meanwhile (none after the first pass)

  void prefetch(std::size_t part, std::size_t parts) const { ahead.part(part, parts); }

  template <int N>
  [[gnu::always_inline]] void load(std::size_t off, __m512i out[N]) const {
    for (int i = 0; i < N; ++i) out[i] = _mm512_loadu_si512(p + 16 * off + 64 * i);
  }
  [[nodiscard]] __m512i load1(std::size_t off) const { return _mm512_loadu_si512(p + 16 * off); }
  template <std::size_t Bytes>
  [[nodiscard]] __m512 load_half(std::size_t off) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * off)));
  }
};

using Prefetcher = RowPrefetcher<16>;

/// The 16 rows of a group in the file's layout; lanes past `valid` repeat the group's first row
/// (they are computed and not stored).
struct FileGroup {
  alignas(64) int offsets[16];  // row i's offset from row 0 (the lanes past `valid`: 0)
  Rows rows;
  const std::byte* w0;
  std::size_t bytes;
  Prefetcher prefetch;

  FileGroup(const QuantArgs& a, std::size_t r0, std::size_t valid, std::size_t block_bytes)
      : offsets{},
        rows{},
        w0(a.w + r0 * a.row_bytes),
        bytes(block_bytes),
        prefetch{w0, a.row_bytes, block_bytes, r0 + 32 <= a.rows} {
    for (std::size_t i = 0; i < 16; ++i)
      offsets[i] = static_cast<int>((i < valid ? i : 0) * a.row_bytes);
    rows.offsets = _mm512_load_si512(offsets);
  }
  /// Block b; with `stream`, the rows' lines ahead of it are requested now.
  const Rows& block(std::size_t b, bool stream) {
    if (stream) prefetch(b);
    for (int i = 0; i < 16; ++i) rows.p[i] = w0 + offsets[i] + b * bytes;
    return rows;
  }
};

/// A group of 16 rows in the rows16 layout: one contiguous stream of 16 x row_bytes, up to `end`,
/// the end of the call's last group.
struct PackedGroup {
  const std::byte* g;
  std::size_t bytes;
  const std::byte* end;

  /// Block b; with `stream`, carrying the lines ahead of it to prefetch.
  [[nodiscard]] Packed16 block(std::size_t b, bool stream) const {
    return {g + 16 * b * bytes, stream ? StreamAhead::of_block(g, bytes, end, b) : StreamAhead{}};
  }
};

/// Lanes [lo, hi) of a group.
inline __mmask16 lane_mask(std::size_t lo, std::size_t hi) {
  return static_cast<__mmask16>(row_mask(hi) & ~row_mask(lo));
}

/// The vector operations of kernels_quant_vnni.hpp at 512 bits, all but the multiply-adds:
/// V512Vnni (kernels_quant_avx512vnni.cpp) adds them as AVX512-VNNI instructions, V512Madd
/// (kernels_quant_avx512_rows16.cpp) as AVX512-BW sequences.
struct V512Ops {
  using I = __m512i;
  using F = __m512;
  using Mask = __mmask16;
  static constexpr int lanes = 16;
  // 32 registers: 16 accumulators of blocks of 32, 8 tokens' sums of super-blocks (plus their
  // dots), 8 tokens of a fused super-block (Q4_K: 4 with both nibbles' chains).
  static constexpr std::size_t tokens32 = 16, tokens_k = 8, fused_k = 8;
  static constexpr int paired_q4_k = 4;

  static I zero() { return _mm512_setzero_si512(); }
  static I splat8(unsigned char v) { return _mm512_set1_epi8(static_cast<char>(v)); }
  static I set1_16(short v) { return _mm512_set1_epi16(v); }
  static I set1_32(int v) { return _mm512_set1_epi32(v); }
  static I lane_pattern(int c0, int c1, int c2, int c3) {
    return _mm512_set_epi32(c3, c2, c1, c0, c3, c2, c1, c0, c3, c2, c1, c0, c3, c2, c1, c0);
  }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  /// (a & c) | b, for b already holding only bits outside c: one vpternlogd.
  static I merge(I a, I b, I c) { return _mm512_ternarylogic_epi32(a, b, c, 0xEC); }
  static I srli16(I v, int n) { return _mm512_srli_epi16(v, static_cast<unsigned>(n)); }
  static I slli16(I v, int n) { return _mm512_slli_epi16(v, static_cast<unsigned>(n)); }
  static I srli32(I v, int n) { return _mm512_srli_epi32(v, static_cast<unsigned>(n)); }
  static I slli32(I v, int n) { return _mm512_slli_epi32(v, static_cast<unsigned>(n)); }
  static I srai16(I v, int n) { return _mm512_srai_epi16(v, static_cast<unsigned>(n)); }
  static I srai32(I v, int n) { return _mm512_srai_epi32(v, static_cast<unsigned>(n)); }
  static I add8(I a, I b) { return _mm512_add_epi8(a, b); }
  static I sub8(I a, I b) { return _mm512_sub_epi8(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo16(I a, I b) { return _mm512_mullo_epi16(a, b); }
  static I mullo32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I shuffle8(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
  static I add8_where(I w, I all, I bit, I v) {
    return _mm512_mask_add_epi8(w, _mm512_test_epi8_mask(all, bit), w, v);
  }
  /// The 16-entry table of IQ4_NL / IQ4_XS values + 128, in every 128-bit lane (for vpshufb).
  static I iq4_table() {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8)));
  }
  static F zero_ps() { return _mm512_setzero_ps(); }
  static F half_lo(I v) { return specdec::cpu::detail::half_lo(v); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F set1_ps(float v) { return _mm512_set1_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F negate(F v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); }
  static F load_ps(const float* p) { return _mm512_load_ps(p); }
  static void store_ps(float* p, F v) { _mm512_store_ps(p, v); }
  static void store(float* y, Mask m, F v) { _mm512_mask_storeu_ps(y, m, v); }

  /// Calls f(group, lanes to store, y of the group's lane 0) for each group of 16 rows of the
  /// call.
  template <class Fn>
  static void for_each_group(const QuantArgs& a, std::size_t block_bytes, Fn&& f) {
    if (a.rows16) {
      for_each_rows16_group(a, [&](const std::byte* g, std::size_t lo, std::size_t hi, float* y,
                                   const std::byte* end) {
        PackedGroup group{g, block_bytes, end};
        f(group, lane_mask(lo, hi), y);
      });
      return;
    }
    for (std::size_t r0 = 0; r0 < a.rows; r0 += 16) {
      const std::size_t valid = a.rows - r0 < 16 ? a.rows - r0 : 16;
      FileGroup group(a, r0, valid, block_bytes);
      f(group, row_mask(valid), a.y + r0);
    }
  }
};

}  // namespace
}  // namespace specdec::cpu::detail
