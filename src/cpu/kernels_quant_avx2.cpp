// AVX2 integer kernels of the quantised types (kernels_impl.hpp, "the quantised types"). Compiled
// with -mavx2 -mfma -mf16c; the path of the file's layout (SPECDEC_REPACK=0, --no-repack) on AVX2
// CPUs and AVX-512 CPUs without VNNI (the repacked layout's are kernels_quant_avx2_rows16.cpp and
// kernels_quant_avx512_rows16.cpp).
//
// Layout: 8 weight rows at a time. Each row's block is unpacked once into unsigned 8-bit weights
// in their natural order (signed for the types with z = 128, Q8_0, IQ4_NL and IQ4_XS, whose
// values as u = value + 128 would make vpmaddubsw's pair sums saturate), with its sub-block scales
// as int16 lanes; then for every token vpmaddubsw multiplies 32 weights by 32 activation quants
// into 16 pair sums and vpmaddwd applies the scales, giving 8 int32 partial sums per row; a
// transpose-add turns the 8 rows' partial sums into one register of 8 exact row sums, and the float
// steps run 8 rows wide. The integers are exact, the float steps those of the portable kernel
// (kernels_quant.cpp), so the results are bitwise equal to it.
#include <immintrin.h>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

using namespace block_layout;

inline __m256i splat8(unsigned char v) { return _mm256_set1_epi8(static_cast<char>(v)); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float half_to_float(const std::byte* p) {
  unsigned short h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

/// [lo | hi] from two 128-bit halves.
inline __m256i join(__m128i lo, __m128i hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/// The low and high nibbles of 16 bytes as 32 bytes: weights 0-15 then 16-31 of a 32-block.
inline __m256i nibbles32(__m128i q) {
  const __m128i m = _mm_set1_epi8(0x0f);
  return join(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m));
}

/// Bit j of the 32-bit qh as 16 in byte j (the fifth bits of Q5_0 / Q5_1).
inline __m256i fifth_bits(const std::byte* qh_bytes) {
  int qh;
  __builtin_memcpy(&qh, qh_bytes, 4);
  // Byte j gets qh's byte j / 8, then keeps bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(qh), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                              2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, splat8(16));
}

/// The IQ4_NL / IQ4_XS values (signed) for nibble indices.
inline __m256i iq4_lookup(__m256i idx) {
  const __m128i t = _mm_sub_epi8(load128(iq4_values_u8), _mm_set1_epi8(static_cast<char>(-128)));
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), idx);
}

using Prefetcher = RowPrefetcher<8>;

/// Sum of each of 8 registers' 8 int32 lanes: lane i of the result = sum of v[i] (exact).
inline __m256i transpose_add8(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]);
  const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]);
  const __m256i h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23);  // [r0 r1 r2 r3 | r0 r1 r2 r3] halves
  const __m256i q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// ================================================================================================
// Blocks of 32: per row one register of weights; the zero point and the mins use the activation
// block's quant sum, the same for every row.

/// Block b of the row at `block` as 32 weights (unsigned; signed Q8_0 and IQ4_NL values), d, m.
template <DType Q>
inline __m256i unpack32(const std::byte* block, float& d, float& m) {
  // d comes first in each of these blocks (q8_0_d = q4_0_d = ... = 0).
  static_assert(q8_0_d == 0 && q4_0_d == 0 && q4_1_d == 0 && q5_0_d == 0 && q5_1_d == 0 &&
                iq4_nl_d == 0);
  d = half_to_float(block);
  if constexpr (Q == DType::q8_0) return load256(block + q8_0_qs);
  if constexpr (Q == DType::q4_1) m = half_to_float(block + q4_1_m);
  if constexpr (Q == DType::q5_1) m = half_to_float(block + q5_1_m);
  if constexpr (Q == DType::q4_0) return nibbles32(load128(block + q4_0_qs));
  if constexpr (Q == DType::q4_1) return nibbles32(load128(block + q4_1_qs));
  if constexpr (Q == DType::q5_0)
    return _mm256_or_si256(nibbles32(load128(block + q5_0_qs)), fifth_bits(block + q5_0_qh));
  if constexpr (Q == DType::q5_1)
    return _mm256_or_si256(nibbles32(load128(block + q5_1_qs)), fifth_bits(block + q5_1_qh));
  return iq4_lookup(nibbles32(load128(block + iq4_nl_qs)));
}

/// 8 rows (rows past `valid` repeat row 0) against every token; acc [n][8].
template <DType Q>
void rows32(const QuantArgs& a, std::size_t r0, std::size_t valid, float* acc) {
  constexpr QuantTraits traits = quant_traits(Q);
  constexpr std::size_t bytes = traits.block_bytes;
  constexpr bool is_signed = traits.zero_point == 128;
  const std::size_t blocks = a.cols / 32;
  const std::byte* rows[8];
  for (std::size_t i = 0; i < 8; ++i) rows[i] = a.w + (r0 + (i < valid ? i : 0)) * a.row_bytes;
  for (std::size_t i = 0; i < a.n * 8; ++i) acc[i] = 0.0f;
  const __m256i ones = _mm256_set1_epi16(1);
  const Prefetcher prefetch{a.w + r0 * a.row_bytes, a.row_bytes, bytes, r0 + 16 <= a.rows};
  for (std::size_t b = 0; b < blocks; ++b) {
    prefetch(b);
    __m256i w[8];
    alignas(32) float d[8], m[8] = {};
    for (int i = 0; i < 8; ++i) w[i] = unpack32<Q>(rows[i] + b * bytes, d[i], m[i]);
    __m256i wabs[8];
    if constexpr (is_signed)
      for (int i = 0; i < 8; ++i) wabs[i] = _mm256_sign_epi8(w[i], w[i]);
    const __m256 dv = _mm256_load_ps(d), mv = _mm256_load_ps(m);
    for (std::size_t t = 0; t < a.n; ++t) {
      const std::size_t xb = t * blocks + b;
      const __m256i x = load256(a.xq + t * a.cols + b * 32);
      __m256i lanes[8];
      for (int i = 0; i < 8; ++i) {
        // maddubs cannot saturate: |w| <= 31 (or 128 with the signs moved to x), |x| <= 127.
        const __m256i pairs = is_signed ? _mm256_maddubs_epi16(wabs[i], _mm256_sign_epi8(x, w[i]))
                                        : _mm256_maddubs_epi16(w[i], x);
        lanes[i] = _mm256_madd_epi16(pairs, ones);
      }
      __m256i isum = transpose_add8(lanes);
      // The zero point of unsigned weights: -z * sum(x) = offset * z / 128 (offset = -128 * sum).
      if constexpr (traits.zero_point != 0 && !is_signed)
        isum = _mm256_add_epi32(
            isum, _mm256_srai_epi32(_mm256_set1_epi32(a.x_offsets[xb]), zero_point_shift(Q)));
      const __m256 dx = _mm256_set1_ps(a.xd[xb]);
      __m256 v = _mm256_loadu_ps(acc + 8 * t);
      v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dv, dx), v);
      if constexpr (traits.has_min) {
        // fma(float(sum), m dx, acc) as fma(-float(sum), -(m dx)): -sum = offset / 128 exactly.
        const __m256 neg_sum =
            _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_set1_epi32(a.x_offsets[xb]), 7));
        v = _mm256_fnmadd_ps(neg_sum, _mm256_mul_ps(mv, dx), v);
      }
      _mm256_storeu_ps(acc + 8 * t, v);
    }
  }
}

// ================================================================================================
// Super-blocks of 256: each row's block unpacked into 8 registers of weights (w[i] = weights
// 32i..32i+31) and 8 of int16 scales (s[i] word p = the scale of weights 32i + 2p, 2p + 1).

struct RowK {
  __m256i w[8];
  __m256i s[8];
  /// int16 per 16 weights, multiplied by the activation sums of 16: -z * scale (zero-point
  /// types) or the min (types with mins).
  __m256i zm;
  float d, m;
};

/// s[i] for sub-blocks of 16: words 0-7 = sc[2i], 8-15 = sc[2i + 1], from 16 signed bytes.
inline void scales16(__m128i sc, __m256i s[8]) {
  const __m256i both = _mm256_broadcastsi128_si256(sc);
  for (int i = 0; i < 8; ++i) {
    // Byte 2i (2i + 1 in the high half) into the high byte of every word, then sign-extended.
    const char lo = static_cast<char>(2 * i), hi = static_cast<char>(2 * i + 1), z = -128;
    const __m256i ctrl = _mm256_setr_epi8(z, lo, z, lo, z, lo, z, lo, z, lo, z, lo, z, lo, z, lo, z,
                                          hi, z, hi, z, hi, z, hi, z, hi, z, hi, z, hi, z, hi);
    s[i] = _mm256_srai_epi16(_mm256_shuffle_epi8(both, ctrl), 8);
  }
}

/// s[i] for sub-blocks of 32: every word = sc[i], from 8 signed bytes (the low half of sc).
inline void scales32(__m128i sc, __m256i s[8]) {
  // Words 0-7 = sc[0..7], in both halves.
  const __m256i words =
      _mm256_broadcastsi128_si256(_mm256_castsi256_si128(_mm256_cvtepi8_epi16(sc)));
  for (int i = 0; i < 8; ++i)
    s[i] = _mm256_shuffle_epi8(words, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * i)));
}

/// The int16 per 16 weights of 8 sub-blocks of 32: words 2j, 2j + 1 = v[j] (v: 8 signed bytes).
inline __m256i per16_from32(__m128i v) { return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(v, v)); }

/// Q4_K / Q5_K: 8 6-bit scales and mins (kernels.hpp's table) as bytes 0-7 of sc and mn.
inline void k_scales_mins(const std::byte* block, __m128i& sc, __m128i& mn) {
  unsigned u[3];
  __builtin_memcpy(u, block + q4_k_scales, 12);
  const unsigned sc_lo = u[0] & 0x3f3f3f3fu, mn_lo = u[1] & 0x3f3f3f3fu;
  const unsigned sc_hi = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
  const unsigned mn_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
  sc = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), 0, 0);
  mn = _mm_setr_epi32(static_cast<int>(mn_lo), static_cast<int>(mn_hi), 0, 0);
}

template <DType Q>
inline void unpack_k(const std::byte* p, RowK& o);

template <>
inline void unpack_k<DType::q2_k>(const std::byte* p, RowK& o) {
  const __m128i scales = load128(p + q2_k_scales);
  const __m128i nib = _mm_set1_epi8(0x0f);
  scales16(_mm_and_si128(scales, nib), o.s);
  o.zm = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scales, 4), nib));
  o.d = half_to_float(p + q2_k_d);
  o.m = -half_to_float(p + q2_k_dmin);
  // Weight 128h + 32s + l: bits 2s of qs[32h + l].
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load256(p + q2_k_qs + 32 * h);
    for (int s = 0; s < 4; ++s)
      o.w[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), splat8(0x03));
  }
}

template <>
inline void unpack_k<DType::q3_k>(const std::byte* p, RowK& o) {
  // 16 6-bit scales: low four bits in byte i % 8 of the first 8 (low nibble for i < 8), top two
  // at bits 2 (i / 4) of byte 8 + i % 4; minus 32.
  unsigned long long lo;
  unsigned hi;
  __builtin_memcpy(&lo, p + q3_k_scales, 8);
  __builtin_memcpy(&hi, p + q3_k_scales + 8, 4);
  const unsigned long long nib = 0x0f0f0f0f0f0f0f0full, two = 0x03030303u;
  const unsigned long long top_lo =
      (hi & two) | (static_cast<unsigned long long>((hi >> 2) & two) << 32);
  const unsigned long long top_hi =
      ((hi >> 4) & two) | (static_cast<unsigned long long>((hi >> 6) & two) << 32);
  const __m128i scales =
      _mm_sub_epi8(_mm_set_epi64x(static_cast<long long>(((lo >> 4) & nib) | (top_hi << 4)),
                                  static_cast<long long>((lo & nib) | (top_lo << 4))),
                   _mm_set1_epi8(32));
  scales16(scales, o.s);
  o.zm = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(scales), _mm256_set1_epi16(-4));
  o.d = half_to_float(p + q3_k_d);
  // Weight 128h + 32s + l: bits 2s of qs[32h + l]; third bit: bit 4h + s of hmask[l].
  const __m256i hm = load256(p + q3_k_hmask);
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load256(p + q3_k_qs + 32 * h);
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * h + s;
      const __m256i third =
          bit >= 2 ? _mm256_srli_epi16(hm, bit - 2) : _mm256_slli_epi16(hm, 2 - bit);
      o.w[4 * h + s] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), splat8(0x03)),
                                       _mm256_and_si256(third, splat8(0x04)));
    }
  }
}

template <>
inline void unpack_k<DType::q4_k>(const std::byte* p, RowK& o) {
  __m128i sc, mn;
  k_scales_mins(p, sc, mn);
  scales32(sc, o.s);
  o.zm = per16_from32(mn);  // mins are < 64: the signed widening keeps them
  o.d = half_to_float(p + q4_k_d);
  o.m = -half_to_float(p + q4_k_dmin);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(p + q4_k_qs + 32 * c);
    o.w[2 * c] = _mm256_and_si256(q, splat8(0x0f));
    o.w[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), splat8(0x0f));
  }
}

template <>
inline void unpack_k<DType::q5_k>(const std::byte* p, RowK& o) {
  __m128i sc, mn;
  k_scales_mins(p, sc, mn);
  scales32(sc, o.s);
  o.zm = per16_from32(mn);
  o.d = half_to_float(p + q5_k_d);
  o.m = -half_to_float(p + q5_k_dmin);
  // Sub-block j's fifth bit: bit j of qh[l].
  const __m256i qh = load256(p + q5_k_qh);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(p + q5_k_qs + 32 * c);
    for (int part = 0; part < 2; ++part) {
      const int j = 2 * c + part;
      const __m256i fifth = j >= 4 ? _mm256_srli_epi16(qh, j - 4) : _mm256_slli_epi16(qh, 4 - j);
      const __m256i low = part == 0 ? q : _mm256_srli_epi16(q, 4);
      o.w[j] = _mm256_or_si256(_mm256_and_si256(low, splat8(0x0f)),
                               _mm256_and_si256(fifth, splat8(0x10)));
    }
  }
}

template <>
inline void unpack_k<DType::q6_k>(const std::byte* p, RowK& o) {
  const __m128i scales = load128(p + q6_k_scales);
  scales16(scales, o.s);
  o.zm = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(scales), _mm256_set1_epi16(-32));
  o.d = half_to_float(p + q6_k_d);
  // Weight 128h + 32 part + l: low four bits from ql[64h + l + 32 (part % 2)] (low nibble for
  // part < 2, high otherwise), top two from bits 2 part of qh[32h + l].
  const __m256i nib = splat8(0x0f), top = splat8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(p + 64 * h), ql1 = load256(p + 64 * h + 32);
    const __m256i qh = load256(p + q6_k_qh + 32 * h);
    __m256i* w = o.w + 4 * h;
    w[0] = _mm256_or_si256(_mm256_and_si256(ql0, nib),
                           _mm256_and_si256(_mm256_slli_epi16(qh, 4), top));
    w[1] = _mm256_or_si256(_mm256_and_si256(ql1, nib),
                           _mm256_and_si256(_mm256_slli_epi16(qh, 2), top));
    w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), nib),
                           _mm256_and_si256(qh, top));
    w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), nib),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), top));
  }
}

template <>
inline void unpack_k<DType::iq4_xs>(const std::byte* p, RowK& o) {
  o.d = half_to_float(p + iq4_xs_d);
  unsigned short high;
  unsigned low;
  __builtin_memcpy(&high, p + iq4_xs_scales_h, 2);
  __builtin_memcpy(&low, p + iq4_xs_scales_l, 4);
  alignas(16) signed char sc[16] = {};
  for (int j = 0; j < 8; ++j)
    sc[j] =
        static_cast<signed char>((((low >> (4 * j)) & 0x0f) | (((high >> (2 * j)) & 3) << 4)) - 32);
  scales32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)), o.s);
  o.zm = _mm256_setzero_si256();  // signed weights: no zero point
  // Sub-blocks 2c, 2c + 1 (16 bytes of qs each): low nibbles weights 0-15, high 16-31.
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(p + iq4_xs_qs + 32 * c);
    const __m256i lo = _mm256_and_si256(q, splat8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), splat8(0x0f));
    o.w[2 * c] = iq4_lookup(_mm256_permute2x128_si256(lo, hi, 0x20));
    o.w[2 * c + 1] = iq4_lookup(_mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

/// 8 rows (rows past `valid` repeat row 0) against every token; acc [n][8].
template <DType Q>
void rows_k(const QuantArgs& a, std::size_t r0, std::size_t valid, float* acc) {
  constexpr QuantTraits traits = quant_traits(Q);
  constexpr bool is_signed = traits.zero_point == 128;  // IQ4_XS: see the file's comment
  const std::size_t blocks = a.cols / 256;
  const std::byte* rows[8];
  for (std::size_t i = 0; i < 8; ++i) rows[i] = a.w + (r0 + (i < valid ? i : 0)) * a.row_bytes;
  for (std::size_t i = 0; i < a.n * 8; ++i) acc[i] = 0.0f;
  RowK blk[8];
  const Prefetcher prefetch{a.w + r0 * a.row_bytes, a.row_bytes, traits.block_bytes,
                            r0 + 16 <= a.rows};
  for (std::size_t b = 0; b < blocks; ++b) {
    prefetch(b);
    alignas(32) float d[8], m[8];
    for (int i = 0; i < 8; ++i) {
      unpack_k<Q>(rows[i] + b * traits.block_bytes, blk[i]);
      d[i] = blk[i].d;
      m[i] = traits.has_min ? blk[i].m : 0.0f;
    }
    const __m256 dv = _mm256_load_ps(d), mv = _mm256_load_ps(m);
    for (std::size_t t = 0; t < a.n; ++t) {
      const std::size_t xb = t * blocks + b;
      const std::int8_t* x = a.xq + t * a.cols + b * 256;
      const __m256i sums = load256(a.x_sums + xb * q8_k_sums);  // 16 sums of 16
      __m256i isums[8], msums[8];
      for (int r = 0; r < 8; ++r) {
        const RowK& o = blk[r];
        __m256i v = traits.has_min ? _mm256_setzero_si256() : _mm256_madd_epi16(sums, o.zm);
        for (int i = 0; i < 8; ++i) {
          const __m256i xv = load256(x + 32 * i);
          // maddubs cannot saturate: w <= 63 (or |w| <= 127 with the signs moved to x), |x| <=
          // 127; nor can madd: |pair| <= 32258, |scale| <= 128.
          const __m256i pairs = is_signed ? _mm256_maddubs_epi16(_mm256_sign_epi8(o.w[i], o.w[i]),
                                                                 _mm256_sign_epi8(xv, o.w[i]))
                                          : _mm256_maddubs_epi16(o.w[i], xv);
          v = _mm256_add_epi32(v, _mm256_madd_epi16(pairs, o.s[i]));
        }
        isums[r] = v;
        if constexpr (traits.has_min) msums[r] = _mm256_madd_epi16(sums, o.zm);
      }
      const __m256 dx = _mm256_set1_ps(a.xd[xb]);
      __m256 v = _mm256_loadu_ps(acc + 8 * t);
      v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(transpose_add8(isums)), _mm256_mul_ps(dv, dx), v);
      if constexpr (traits.has_min)
        v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(transpose_add8(msums)), _mm256_mul_ps(mv, dx), v);
      _mm256_storeu_ps(acc + 8 * t, v);
    }
  }
}

template <DType Q>
void matmul_rows(const QuantArgs& a) {
  constexpr bool K = super_blocks(Q);
  // Tokens in chunks of 64 (acc: 2 KiB); the weights are read once per chunk.
  constexpr std::size_t chunk = 64;
  alignas(32) float acc[chunk * 8];
  for (std::size_t t0 = 0; t0 < a.n; t0 += chunk) {
    QuantArgs c = a;
    c.n = a.n - t0 < chunk ? a.n - t0 : chunk;
    c.xq = a.xq + t0 * a.cols;
    c.xd = a.xd + t0 * (a.cols / (K ? 256 : 32));
    if constexpr (K)
      c.x_sums = a.x_sums + t0 * (a.cols / 256) * q8_k_sums;
    else
      c.x_offsets = a.x_offsets + t0 * (a.cols / 32);
    for (std::size_t r = 0; r < a.rows; r += 8) {
      const std::size_t valid = a.rows - r < 8 ? a.rows - r : 8;
      if constexpr (K)
        rows_k<Q>(c, r, valid, acc);
      else
        rows32<Q>(c, r, valid, acc);
      for (std::size_t t = 0; t < c.n; ++t)
        for (std::size_t i = 0; i < valid; ++i) a.y[(t0 + t) * a.ldy + r + i] = acc[t * 8 + i];
    }
  }
}

}  // namespace

void quant_matmul_avx2(const QuantArgs& a) {
  with_quant_type(a.type, [&]<DType Q>() { matmul_rows<Q>(a); });
}

}  // namespace specdec::cpu::detail
