// AVX-VNNI integer kernels of the quantised types, over weights repacked at load into the rows16
// layout (kernels_impl.hpp). Compiled with the AVX2 flags plus -mavxvnni; kernels.cpp calls
// quant_matmul_avxvnni for Isa::avx2 only when cpu_features().avx_vnni (Intel client cores from
// Alder Lake on and the E-core Xeons, which have the VEX vpdpbusd but no AVX-512).
//
// The algorithm is the AVX512-VNNI kernel's (kernels_quant_avx512vnni.cpp, whose comments explain
// the unpacking and the integer and float steps) at 8 lanes instead of 16: each 64-byte register
// of the rows16 layout (dword i of rows 0..15) is two of ours, rows 0-7 then rows 8-15, so a group
// of 16 rows is computed as two halves of 8, one after the other over the whole row. The second
// half reads the lines the first one brought in (a group of 16 rows is 14-120 KiB on the Qwen
// files, in L2), so memory streams each weight once. Each lane computes its row's integers
// exactly and its floats in the documented order: the results are bitwise the portable kernel's
// (kernels_quant.cpp), for any token count and row range.
//
// What differs from the AVX-512 kernel is only what AVX2 lacks: masked stores and adds (vector
// masks instead), vpternlog (and / or), vpmovdw (a byte shuffle), embedded broadcasts (vpdpbusd
// takes a broadcast register), and 16 vector registers instead of 32 (fewer tokens per pass).
#include <immintrin.h>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

using namespace block_layout;

inline __m256i splat8(unsigned char v) { return _mm256_set1_epi8(static_cast<char>(v)); }

/// Broadcast of the 4 int8 (or 2 int16) at p.
inline __m256i bcast32(const void* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

/// acc + the 8 lanes' dot products of w's 4 unsigned bytes with the 4 signed bytes at x.
inline __m256i dpbusd_x4(__m256i acc, __m256i w, const std::int8_t* x) {
  return _mm256_dpbusd_avx_epi32(acc, w, bcast32(x));
}

/// (a & c) | b, for b already holding only bits outside c.
inline __m256i merge(__m256i a, __m256i b, __m256i c) {
  return _mm256_or_si256(_mm256_and_si256(a, c), b);
}

/// vpshufb control: in every dword, byte `to` <- byte `from` of the same dword (and, when
/// from2 >= 0, byte `to2` <- byte `from2`), every other byte 0.
inline __m256i pick(int from, int to, int from2 = -1, int to2 = -1) {
  unsigned pattern = 0x80808080u, step = 4u << (8 * to);
  pattern = (pattern & ~(0xffu << (8 * to))) | (static_cast<unsigned>(from) << (8 * to));
  if (from2 >= 0) {
    pattern = (pattern & ~(0xffu << (8 * to2))) | (static_cast<unsigned>(from2) << (8 * to2));
    step |= 4u << (8 * to2);
  }
  // dword d of a 128-bit lane: its bytes are 4d .. 4d + 3 of the lane.
  const int c0 = static_cast<int>(pattern), c1 = static_cast<int>(pattern + step),
            c2 = static_cast<int>(pattern + 2 * step), c3 = static_cast<int>(pattern + 3 * step);
  return _mm256_set_epi32(c3, c2, c1, c0, c3, c2, c1, c0);
}

/// The byte `from` of each lane as an unsigned (zero-extended) int32.
inline __m256i byte_u32(__m256i v, int from) { return _mm256_shuffle_epi8(v, pick(from, 0)); }
/// The byte `from` of each lane as a signed int32.
inline __m256i byte_i32(__m256i v, int from) {
  return _mm256_srai_epi32(_mm256_shuffle_epi8(v, pick(from, 3)), 24);
}
/// Bytes `a` and `b` of each lane as a pair of signed int16 (a in the low half).
inline __m256i bytes_i16_pair(__m256i v, int a, int b) {
  return _mm256_srai_epi16(_mm256_shuffle_epi8(v, pick(a, 1, b, 3)), 8);
}
/// Bytes `a` and `b` of each lane as a pair of unsigned int16.
inline __m256i bytes_u16_pair(__m256i v, int a, int b) {
  return _mm256_shuffle_epi8(v, pick(a, 0, b, 2));
}

/// Binary16 values in the low (or high) half of each lane, as floats: the low halves are
/// gathered into the low 8 bytes of each 128-bit lane, the two quadwords joined, converted.
inline __m256 half_lo(__m256i v) {
  const __m256i low_halves =
      _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9,
                       12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, low_halves), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}
inline __m256 half_hi(__m256i v) { return half_lo(_mm256_srli_epi32(v, 16)); }

/// Half h (rows 8h .. 8h + 7) of one block of a group of 16 rows in the rows16 layout: p is the
/// block's start (16 x block_bytes). A field of 4k bytes is k registers of 64 bytes, ours the
/// 32 at 32h; a 2-byte field is the 16 rows' values in order, ours the 16 bytes at 16h.
struct Half {
  const std::byte* p;
  int h;
};

/// out[i] lane r = bytes off + 4i .. off + 4i + 3 of row 8h + r, for i < N.
template <int N>
[[gnu::always_inline]] inline void load(const Half& s, std::size_t off, __m256i out[N]) {
  for (int i = 0; i < N; ++i)
    out[i] =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.p + 16 * off + 64 * i + 32 * s.h));
}
inline __m256i load1(const Half& s, std::size_t off) {
  __m256i v;
  load<1>(s, off, &v);
  return v;
}
/// The binary16 field at `off` (a 2-byte field of the rows16 table) as 8 floats.
inline __m256 load_half(const Half& s, std::size_t off) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.p + 16 * off + 16 * s.h)));
}

/// The 16-entry table of IQ4_NL / IQ4_XS values + 128, in both 128-bit lanes (for vpshufb).
inline __m256i iq4_table() {
  return _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8)));
}

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, splat8(0x0f)); }
inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), splat8(0x0f));
}

/// The 8 rows of a half group: where its blocks are, the lanes to store and the prefetch.
using Prefetcher = RowPrefetcher<16>;
struct HalfGroup {
  const std::byte* g;  ///< the group's row 0
  std::size_t bytes;   ///< block bytes
  const std::byte* end;
  int h;
  __m256i store;  ///< lane r: all ones when row 8h + r is in the call's range

  /// The same prefetch as the AVX-512 kernel's packed groups, issued by the first half only (the
  /// second finds the lines in cache).
  void prefetch_block(std::size_t b) const {
    if (h != 0) return;
    const std::byte* lo = g + 16 * b * bytes + 16 * Prefetcher::ahead;
    const std::byte* hi = lo + 16 * bytes < end ? lo + 16 * bytes : end;
    for (const std::byte* p = lo; p < hi; p += 64) Prefetcher::prefetch_l2(p);
  }
  [[nodiscard]] Half block(std::size_t b) const { return {g + 16 * b * bytes, h}; }
};

/// Calls f(half group, y of its lane 0) for each half of each group of 16 rows of the call that
/// holds rows of its range.
template <class F>
void for_each_half(const QuantArgs& a, std::size_t block_bytes, F&& f) {
  const std::size_t span = a.first_lane + a.rows;
  const std::byte* end = a.w + (span + 15) / 16 * 16 * a.row_bytes;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::size_t g0 = 0; g0 < span; g0 += 16) {
    const std::size_t lo = g0 == 0 ? a.first_lane : 0, hi = span - g0 < 16 ? span - g0 : 16;
    for (int h = 0; h < 2; ++h) {
      const int first = static_cast<int>(lo) - 8 * h, last = static_cast<int>(hi) - 8 * h;
      if (last <= 0 || first >= 8) continue;
      // lane r stored when first <= r < last
      const __m256i store = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(first), lane),
                                                _mm256_cmpgt_epi32(_mm256_set1_epi32(last), lane));
      HalfGroup half{a.w + g0 * a.row_bytes, block_bytes, end, h, store};
      f(half, a.y + g0 - a.first_lane + 8 * static_cast<std::size_t>(h));
    }
  }
}

// ================================================================================================
// Blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): one block of 8 rows in 8 registers, w[k] =
// weights 4k..4k+3, then up to 4 tokens with their accumulators in registers.

struct Block32 {
  __m256i w[8];
  __m256 d, m;
};

/// The fifth bits of Q5_0 / Q5_1 (qh: bit j = weight j's, one dword per lane) added as 16.
inline void add_fifth_bits(__m256i qh, __m256i w[8]) {
  for (int k = 0; k < 8; ++k) {
    // Every byte of the lane gets qh's byte k / 2; byte b of the dword tests bit 4 (k % 2) + b.
    const __m256i spread = _mm256_shuffle_epi8(qh, pick(k / 2, 0, k / 2, 1));
    const __m256i all = _mm256_or_si256(spread, _mm256_slli_epi32(spread, 16));
    const int shift = 4 * (k % 2);
    const __m256i bit = _mm256_set1_epi32((1 << shift) | (2 << (shift + 8)) | (4 << (shift + 16)) |
                                          static_cast<int>(8u << (shift + 24)));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(all, bit), bit);
    w[k] = _mm256_add_epi8(w[k], _mm256_and_si256(set, splat8(16)));
  }
}

template <DType Q>
[[gnu::always_inline]] inline void unpack32(const Half& rows, Block32& o) {
  if constexpr (Q == DType::q8_0) {
    // Signed bytes made unsigned: w ^ 0x80 = w + 128 as u8, exact for every int8 (-128 too).
    load<8>(rows, q8_0_qs, o.w);
    for (int k = 0; k < 8; ++k) o.w[k] = _mm256_xor_si256(o.w[k], splat8(0x80));
    o.d = load_half(rows, q8_0_d);
    return;
  }
  constexpr std::size_t qs = Q == DType::q4_0   ? q4_0_qs
                             : Q == DType::q4_1 ? q4_1_qs
                             : Q == DType::q5_0 ? q5_0_qs
                             : Q == DType::q5_1 ? q5_1_qs
                                                : iq4_nl_qs;
  __m256i packed[4];
  load<4>(rows, qs, packed);
  for (int k = 0; k < 4; ++k) {
    o.w[k] = low_nibbles(packed[k]);       // weights 4k .. 4k + 3
    o.w[k + 4] = high_nibbles(packed[k]);  // weights 16 + 4k ..
  }
  if constexpr (Q == DType::q4_1 || Q == DType::q5_1) {
    const __m256i head = load1(rows, Q == DType::q4_1 ? q4_1_d : q5_1_d);  // d | m << 16
    o.d = half_lo(head);
    o.m = half_hi(head);
  } else {
    constexpr std::size_t d = Q == DType::q4_0 ? q4_0_d : Q == DType::q5_0 ? q5_0_d : iq4_nl_d;
    o.d = load_half(rows, d);
  }
  if constexpr (Q == DType::q5_0) add_fifth_bits(load1(rows, q5_0_qh), o.w);
  if constexpr (Q == DType::q5_1) add_fifth_bits(load1(rows, q5_1_qh), o.w);
  if constexpr (Q == DType::iq4_nl) {
    const __m256i table = iq4_table();
    for (int k = 0; k < 8; ++k) o.w[k] = _mm256_shuffle_epi8(table, o.w[k]);
  }
}

/// The half group against the T tokens from t0; y: the half's lane 0 for token 0.
template <DType Q, int T>
void half32(const HalfGroup& group, const QuantArgs& a, std::size_t t0, float* y) {
  constexpr QuantTraits traits = quant_traits(Q);
  const std::size_t blocks = a.cols / 32;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  Block32 blk;
  for (std::size_t b = 0; b < blocks; ++b) {
    if (t0 == 0) group.prefetch_block(b);
    unpack32<Q>(group.block(b), blk);
    for (int t = 0; t < T; ++t) {
      const std::size_t xb = (t0 + t) * blocks + b;
      const std::int8_t* x = a.xq + (t0 + t) * a.cols + b * 32;
      // The zero point as the start value: -z * sum(x) = offset * z / 128 (offset = -128 * sum).
      __m256i isum = _mm256_setzero_si256();
      if constexpr (traits.zero_point != 0)
        isum = _mm256_srai_epi32(_mm256_set1_epi32(a.x_offsets[xb]), zero_point_shift(Q));
      for (int k = 0; k < 8; ++k) isum = dpbusd_x4(isum, blk.w[k], x + 4 * k);
      const __m256 dx = _mm256_set1_ps(a.xd[xb]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(blk.d, dx), acc[t]);
      if constexpr (traits.has_min) {
        // fma(float(sum), m dx, acc) as fma(-float(sum), -(m dx)): -sum = offset / 128 exactly.
        const __m256 neg_sum =
            _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_set1_epi32(a.x_offsets[xb]), 7));
        acc[t] = _mm256_fnmadd_ps(neg_sum, _mm256_mul_ps(blk.m, dx), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_maskstore_ps(y + (t0 + t) * a.ldy, group.store, acc[t]);
}

/// Tokens per pass over a block: 4 accumulators and the block's 8 weight registers fit the 16.
constexpr std::size_t kTokens32 = 4;

template <DType Q>
void matmul32(const QuantArgs& a) {
  using Fn = void (*)(const HalfGroup&, const QuantArgs&, std::size_t, float*);
  static constexpr Fn table[kTokens32] = {&half32<Q, 1>, &half32<Q, 2>, &half32<Q, 3>,
                                          &half32<Q, 4>};
  for_each_half(a, quant_traits(Q).block_bytes, [&](const HalfGroup& group, float* y) {
    for (std::size_t t0 = 0; t0 < a.n; t0 += kTokens32)
      table[(a.n - t0 < kTokens32 ? a.n - t0 : kTokens32) - 1](group, a, t0, y);
  });
}

// ================================================================================================
// Super-blocks of 256 (the K-quants, IQ4_XS): one super-block of 8 rows unpacked into 64
// registers' worth of L1, its sub-block scales as int32 lanes and its zero-point or min factors as
// int16 pairs (BlockK of the AVX-512 kernel, 8 lanes wide); then the tokens in groups of up to 4.

struct BlockK {
  __m256i w[64];
  __m256i sc[16];
  __m256i zm[8];
  __m256 d, m;
};

constexpr int unpack_shift(DType q) { return q == DType::q4_k ? 4 : 0; }

/// Q4_K / Q5_K scales and mins: 8 6-bit values each from 12 bytes (kernels.hpp's table).
inline void k_scales_mins(const Half& rows, BlockK& o) {
  __m256i h[4];  // d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
  static_assert(q4_k_d == q5_k_d && q4_k_scales == q5_k_scales && q4_k_scales == q4_k_d + 4);
  load<4>(rows, q4_k_d, h);
  o.d = half_lo(h[0]);
  o.m = _mm256_xor_ps(half_hi(h[0]), _mm256_set1_ps(-0.0f));
  const __m256i top = splat8(0x30);
  const __m256i sc_lo = _mm256_and_si256(h[1], splat8(0x3f));
  const __m256i sc_hi =
      merge(h[3], _mm256_and_si256(_mm256_srli_epi32(h[1], 2), top), splat8(0x0f));
  const __m256i mn_lo = _mm256_and_si256(h[2], splat8(0x3f));
  const __m256i mn_hi = merge(_mm256_srli_epi32(h[3], 4),
                              _mm256_and_si256(_mm256_srli_epi32(h[2], 2), top), splat8(0x0f));
  for (int j = 0; j < 4; ++j) {
    o.sc[j] = byte_u32(sc_lo, j);
    o.sc[j + 4] = byte_u32(sc_hi, j);
  }
  o.zm[0] = bytes_u16_pair(mn_lo, 0, 1);
  o.zm[1] = bytes_u16_pair(mn_lo, 2, 3);
  o.zm[2] = bytes_u16_pair(mn_hi, 0, 1);
  o.zm[3] = bytes_u16_pair(mn_hi, 2, 3);
}

template <DType Q>
requires(Q == DType::q2_k) inline void unpack_k(const Half& rows, BlockK& o) {
  __m256i s[4];
  load<4>(rows, q2_k_scales, s);
  for (int i = 0; i < 16; ++i)
    o.sc[i] = _mm256_and_si256(byte_u32(s[i / 4], i % 4), _mm256_set1_epi32(0x0f));
  for (int i = 0; i < 8; ++i)
    o.zm[i] = _mm256_srli_epi16(bytes_u16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1), 4);
  const __m256i head = load1(rows, q2_k_d);
  o.d = half_lo(head);
  o.m = _mm256_xor_ps(half_hi(head), _mm256_set1_ps(-0.0f));
  for (int h = 0; h < 2; ++h) {
    __m256i q[8];
    load<8>(rows, q2_k_qs + 32 * h, q);
    for (int s2 = 0; s2 < 4; ++s2)
      for (int k = 0; k < 8; ++k)
        o.w[32 * h + 8 * s2 + k] = _mm256_and_si256(_mm256_srli_epi16(q[k], 2 * s2), splat8(0x03));
  }
}

template <DType Q>
requires(Q == DType::q3_k) inline void unpack_k(const Half& rows, BlockK& o) {
  __m256i sc[3];
  load<3>(rows, q3_k_scales, sc);
  o.d = load_half(rows, q3_k_d);
  for (int g = 0; g < 4; ++g) {
    const __m256i src = g % 2 == 0 ? sc[0] : sc[1];
    const __m256i low = g < 2 ? src : _mm256_srli_epi32(src, 4);
    const __m256i high =
        _mm256_and_si256(_mm256_slli_epi32(_mm256_srli_epi32(sc[2], 2 * g), 4), splat8(0x30));
    const __m256i scales = _mm256_sub_epi8(merge(low, high, splat8(0x0f)), splat8(32));
    for (int b = 0; b < 4; ++b) o.sc[4 * g + b] = byte_i32(scales, b);
    o.zm[2 * g] = _mm256_mullo_epi16(bytes_i16_pair(scales, 0, 1), _mm256_set1_epi16(-4));
    o.zm[2 * g + 1] = _mm256_mullo_epi16(bytes_i16_pair(scales, 2, 3), _mm256_set1_epi16(-4));
  }
  __m256i hm[8];
  load<8>(rows, q3_k_hmask, hm);
  for (int h = 0; h < 2; ++h) {
    __m256i q[8];
    load<8>(rows, q3_k_qs + 32 * h, q);
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * h + s;
      for (int k = 0; k < 8; ++k) {
        const __m256i third =
            bit >= 2 ? _mm256_srli_epi16(hm[k], bit - 2) : _mm256_slli_epi16(hm[k], 2 - bit);
        o.w[32 * h + 8 * s + k] = merge(_mm256_srli_epi16(q[k], 2 * s),
                                        _mm256_and_si256(third, splat8(0x04)), splat8(0x03));
      }
    }
  }
}

template <DType Q>
requires(Q == DType::q4_k) inline void unpack_k(const Half& rows, BlockK& o) {
  k_scales_mins(rows, o);
  for (int c = 0; c < 4; ++c) {
    o.sc[2 * c] = _mm256_slli_epi32(o.sc[2 * c], 4);
    __m256i q[8];
    load<8>(rows, q4_k_qs + 32 * c, q);
    for (int k = 0; k < 8; ++k) {
      o.w[16 * c + k] = low_nibbles(q[k]);
      o.w[16 * c + 8 + k] = _mm256_and_si256(q[k], splat8(0xf0));
    }
  }
}

inline __m256i move_bit(__m256i v, int from, int to) {
  return from >= to ? _mm256_srli_epi16(v, from - to) : _mm256_slli_epi16(v, to - from);
}

template <DType Q>
requires(Q == DType::q5_k) inline void unpack_k(const Half& rows, BlockK& o) {
  k_scales_mins(rows, o);
  __m256i qh[8];
  load<8>(rows, q5_k_qh, qh);
  const __m256i bit4 = splat8(0x10);
  for (int c = 0; c < 4; ++c) {
    __m256i q[8];
    load<8>(rows, q5_k_qs + 32 * c, q);
    for (int k = 0; k < 8; ++k) {
      o.w[16 * c + k] =
          merge(q[k], _mm256_and_si256(move_bit(qh[k], 2 * c, 4), bit4), splat8(0x0f));
      o.w[16 * c + 8 + k] =
          merge(_mm256_srli_epi16(q[k], 4), _mm256_and_si256(move_bit(qh[k], 2 * c + 1, 4), bit4),
                splat8(0x0f));
    }
  }
}

template <DType Q>
requires(Q == DType::q6_k) inline void unpack_k(const Half& rows, BlockK& o) {
  __m256i s[4];
  load<4>(rows, q6_k_scales, s);
  for (int i = 0; i < 16; ++i) o.sc[i] = byte_i32(s[i / 4], i % 4);
  for (int i = 0; i < 8; ++i)
    o.zm[i] = _mm256_mullo_epi16(bytes_i16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1),
                                 _mm256_set1_epi16(-32));
  o.d = load_half(rows, q6_k_d);
  const __m256i top = splat8(0x30);
  for (int h = 0; h < 2; ++h) {
    __m256i ql0[8], ql1[8], qh[8];
    load<8>(rows, 64 * h, ql0);
    load<8>(rows, 64 * h + 32, ql1);
    load<8>(rows, q6_k_qh + 32 * h, qh);
    for (int k = 0; k < 8; ++k) {
      __m256i* w = o.w + 32 * h + k;
      w[0] = merge(ql0[k], _mm256_and_si256(_mm256_slli_epi16(qh[k], 4), top), splat8(0x0f));
      w[8] = merge(ql1[k], _mm256_and_si256(_mm256_slli_epi16(qh[k], 2), top), splat8(0x0f));
      w[16] = merge(_mm256_srli_epi16(ql0[k], 4), _mm256_and_si256(qh[k], top), splat8(0x0f));
      w[24] = merge(_mm256_srli_epi16(ql1[k], 4),
                    _mm256_and_si256(_mm256_srli_epi16(qh[k], 2), top), splat8(0x0f));
    }
  }
}

template <DType Q>
requires(Q == DType::iq4_xs) inline void unpack_k(const Half& rows, BlockK& o) {
  const __m256i head = load1(rows, iq4_xs_d);  // d | scales_h << 16
  const __m256i low = load1(rows, iq4_xs_scales_l);
  o.d = half_lo(head);
  const __m256i high = _mm256_srli_epi32(head, 16);
  const __m256i nibble = _mm256_set1_epi32(0x0f), two = _mm256_set1_epi32(0x30);
  for (int j = 0; j < 8; ++j) {
    const __m256i lo4 = _mm256_and_si256(_mm256_srli_epi32(low, 4 * j), nibble);
    const __m256i hi2 = _mm256_and_si256(
        2 * j >= 4 ? _mm256_srli_epi32(high, 2 * j - 4) : _mm256_slli_epi32(high, 4 - 2 * j), two);
    o.sc[j] = _mm256_sub_epi32(_mm256_or_si256(lo4, hi2), _mm256_set1_epi32(32));
  }
  for (int i = 0; i < 4; ++i) {
    const __m256i pair = _mm256_or_si256(_mm256_and_si256(o.sc[2 * i], _mm256_set1_epi32(0xffff)),
                                         _mm256_slli_epi32(o.sc[2 * i + 1], 16));
    o.zm[i] = _mm256_mullo_epi16(pair, _mm256_set1_epi16(-128));
  }
  const __m256i table = iq4_table();
  for (int c = 0; c < 4; ++c) {
    __m256i q[8];
    load<8>(rows, iq4_xs_qs + 32 * c, q);
    for (int k = 0; k < 4; ++k)
      for (int sub = 0; sub < 2; ++sub) {
        __m256i* w = o.w + 16 * c + 8 * sub + k;
        w[0] = _mm256_shuffle_epi8(table, low_nibbles(q[4 * sub + k]));
        w[4] = _mm256_shuffle_epi8(table, high_nibbles(q[4 * sub + k]));
      }
  }
}

/// The end of a super-block for T tokens, as the AVX-512 kernel's k_finish.
template <int T, int SD, bool HasMin, int Shift>
[[gnu::always_inline]] inline void k_finish(const BlockK& o, const QuantArgs& a, std::size_t t0,
                                            std::size_t b, __m256i* isum, float* acc) {
  constexpr int nz = SD == 4 ? 8 : 4;
  const std::size_t blocks = a.cols / 256;
  for (int t = 0; t < T; ++t) {
    const std::size_t xb = (t0 + t) * blocks + b;
    const std::int16_t* sums = a.x_sums + xb * q8_k_sums + (nz == 8 ? 0 : 16);
    if constexpr (Shift != 0) isum[t] = _mm256_srai_epi32(isum[t], Shift);
    __m256i zm = HasMin ? _mm256_setzero_si256() : isum[t];
    for (int i = 0; i < nz; ++i) zm = _mm256_dpwssd_avx_epi32(zm, o.zm[i], bcast32(sums + 2 * i));
    const __m256 dx = _mm256_set1_ps(a.xd[xb]);
    __m256 v = _mm256_load_ps(acc + 8 * t);
    v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(HasMin ? isum[t] : zm), _mm256_mul_ps(o.d, dx), v);
    if constexpr (HasMin) v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(zm), _mm256_mul_ps(o.m, dx), v);
    _mm256_store_ps(acc + 8 * t, v);
  }
}

/// T tokens from t0 (T <= 4) against super-block b of the 8 rows.
template <int T, int SD, bool HasMin, int Shift>
void k_tokens(const BlockK& o, const QuantArgs& a, std::size_t t0, std::size_t b, float* acc) {
  constexpr int subs = 64 / SD;
  const std::int8_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
  __m256i isum[T];
  for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
  for (int j = 0; j < subs; ++j) {
    __m256i dot[T];
    for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
    for (int i = 0; i < SD; ++i) {
      const __m256i w = o.w[SD * j + i];
      for (int t = 0; t < T; ++t) dot[t] = dpbusd_x4(dot[t], w, x[t] + 4 * (SD * j + i));
    }
    const __m256i sc = o.sc[j];
    for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dot[t], sc));
  }
  k_finish<T, SD, HasMin, Shift>(o, a, t0, b, isum, acc);
}

/// Q4_K for up to 4 tokens (decode, a verify), each weight register multiplied by the T tokens
/// as soon as it is unpacked (the AVX-512 kernel's q4_k_fused; with 16 registers the packed
/// bytes are loaded again for the high nibbles rather than kept): the same integers and float
/// steps as unpack_k + k_tokens.
template <int T>
void q4_k_fused(const Half& rows, const QuantArgs& a, std::size_t t0, std::size_t b, float* acc) {
  BlockK o;  // only the scales, mins and factors are filled
  k_scales_mins(rows, o);
  const std::int8_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
  __m256i isum[T];
  for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    if constexpr (T <= 2) {
      // Few tokens: both sub-blocks' chains together, more independent vpdpbusd in flight.
      __m256i lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        __m256i q;
        load<1>(rows, q4_k_qs + 32 * c + 4 * k, &q);
        const __m256i wl = low_nibbles(q), wh = _mm256_and_si256(q, splat8(0xf0));
        for (int t = 0; t < T; ++t) {
          lo[t] = dpbusd_x4(lo[t], wl, x[t] + 4 * (16 * c + k));
          hi[t] = dpbusd_x4(hi[t], wh, x[t] + 4 * (16 * c + 8 + k));
        }
      }
      const __m256i sl = _mm256_slli_epi32(o.sc[2 * c], 4), sh = o.sc[2 * c + 1];
      for (int t = 0; t < T; ++t) {
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(lo[t], sl));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(hi[t], sh));
      }
      continue;
    }
    for (int half = 0; half < 2; ++half) {
      // Sub-block 2c (low nibbles, scale x 16) or 2c + 1 (high nibbles in place), as unpack_k.
      __m256i dot[T];
      for (int t = 0; t < T; ++t) dot[t] = _mm256_setzero_si256();
      for (int k = 0; k < 8; ++k) {
        __m256i q;
        load<1>(rows, q4_k_qs + 32 * c + 4 * k, &q);
        const __m256i w = half == 0 ? low_nibbles(q) : _mm256_and_si256(q, splat8(0xf0));
        for (int t = 0; t < T; ++t)
          dot[t] = dpbusd_x4(dot[t], w, x[t] + 4 * (16 * c + 8 * half + k));
      }
      const __m256i sc = half == 0 ? _mm256_slli_epi32(o.sc[2 * c], 4) : o.sc[2 * c + 1];
      for (int t = 0; t < T; ++t)
        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dot[t], sc));
    }
  }
  constexpr QuantTraits traits = quant_traits(DType::q4_k);
  k_finish<T, traits.sub_elems / 4, traits.has_min, unpack_shift(DType::q4_k)>(o, a, t0, b, isum,
                                                                               acc);
}

/// Tokens per k_tokens call: 4 dot and 4 sum registers leave room for the weights and scales.
constexpr std::size_t kTokensK = 4;

template <DType Q>
void matmul_k(const QuantArgs& a) {
  constexpr QuantTraits traits = quant_traits(Q);
  constexpr int sd = traits.sub_elems / 4;
  constexpr int shift = unpack_shift(Q);
  using TokensFn = void (*)(const BlockK&, const QuantArgs&, std::size_t, std::size_t, float*);
  static constexpr TokensFn tokens[kTokensK] = {
      &k_tokens<1, sd, traits.has_min, shift>, &k_tokens<2, sd, traits.has_min, shift>,
      &k_tokens<3, sd, traits.has_min, shift>, &k_tokens<4, sd, traits.has_min, shift>};
  const std::size_t blocks = a.cols / 256;
  constexpr std::size_t chunk = 64;  // tokens per pass over the weights (acc: 2 KiB)
  alignas(32) BlockK blk;
  alignas(32) float acc[chunk * 8];
  for_each_half(a, traits.block_bytes, [&](const HalfGroup& group, float* y) {
    for (std::size_t t0 = 0; t0 < a.n; t0 += chunk) {
      const std::size_t m = a.n - t0 < chunk ? a.n - t0 : chunk;
      for (std::size_t i = 0; i < m * 8; ++i) acc[i] = 0.0f;
      for (std::size_t b = 0; b < blocks; ++b) {
        if (t0 == 0) group.prefetch_block(b);
        if constexpr (Q == DType::q4_k)
          if (m <= kTokensK) {
            static constexpr void (*fused[kTokensK])(const Half&, const QuantArgs&, std::size_t,
                                                     std::size_t, float*) = {
                &q4_k_fused<1>, &q4_k_fused<2>, &q4_k_fused<3>, &q4_k_fused<4>};
            fused[m - 1](group.block(b), a, t0, b, acc);
            continue;
          }
        unpack_k<Q>(group.block(b), blk);
        for (std::size_t t1 = 0; t1 < m; t1 += kTokensK)
          tokens[(m - t1 < kTokensK ? m - t1 : kTokensK) - 1](blk, a, t0 + t1, b, acc + 8 * t1);
      }
      for (std::size_t t = 0; t < m; ++t)
        _mm256_maskstore_ps(y + (t0 + t) * a.ldy, group.store, _mm256_load_ps(acc + 8 * t));
    }
  });
}

}  // namespace

void quant_matmul_avxvnni(const QuantArgs& a) {
  with_quant_type(a.type, [&]<DType Q>() {
    if constexpr (super_blocks(Q))
      matmul_k<Q>(a);
    else
      matmul32<Q>(a);
  });
}

}  // namespace specdec::cpu::detail
