// AVX512-VNNI integer kernels of the quantised types (kernels_impl.hpp, "the quantised types").
// Compiled with the AVX-512 flags plus -mavx512vnni; kernels.cpp calls quant_matmul_avx512vnni
// only when cpu_features().avx512_vnni (on AMX machines too).
//
// Layout: 16 weight rows at a time, one per 32-bit lane ("lanes = rows"). A block of the 16 rows is
// read once from memory, its packed bytes transposed so that dword i of lane r holds bytes 4i..4i+3
// of row r (or, for weights repacked at load into the rows16 layout of kernels_impl.hpp, loaded
// already so), its bit fields unpacked into unsigned 8-bit weights in the same lanes, in the
// weights' natural order: register k holds weights 4k..4k+3 of every row. Every token of the call
// then multiplies that block: vpdpbusd with the token's 4 activation quants broadcast adds 16 rows
// x 4 products per instruction, one vpmulld applies the 16 rows' sub-block scales, vpdpwssd the
// zero-point or min terms against the activation sums, and the float steps run 16 rows wide. Each
// lane computes its row's integers exactly and its floats in the documented order, so the results
// are bitwise the portable kernel's (kernels_quant.cpp), for any token count and row range.
#include <immintrin.h>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

using namespace block_layout;

inline __mmask16 row_mask(std::size_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1u);
}

inline __m512i splat8(unsigned char v) { return _mm512_set1_epi8(static_cast<char>(v)); }

/// Broadcast of the 4 int8 (or 2 int16) at p.
inline __m512i bcast32(const void* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

/// acc + the 16 lanes' dot products of w's 4 unsigned bytes with the 4 signed bytes at x
/// (broadcast). Written as assembly so that the broadcast stays an operand of vpdpbusd: GCC
/// would load it into a register first, an extra instruction per vpdpbusd that costs about a
/// fifth of the token loop's speed (measured on an Emerald Rapids Xeon: 66 -> 87 MACs per cycle).
inline __m512i dpbusd_x4(__m512i acc, __m512i w, const std::int8_t* x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(w), "m"(*reinterpret_cast<const int*>(x)));
  return acc;
}

/// (a & c) | b, for b already holding only bits outside c.
inline __m512i merge(__m512i a, __m512i b, __m512i c) {
  return _mm512_ternarylogic_epi32(a, b, c, 0xEC);
}

/// vpshufb control: in every dword, byte `to` <- byte `from` of the same dword (and, when
/// from2 >= 0, byte `to2` <- byte `from2`), every other byte 0.
inline __m512i pick(int from, int to, int from2 = -1, int to2 = -1) {
  unsigned pattern = 0x80808080u, step = 4u << (8 * to);
  pattern = (pattern & ~(0xffu << (8 * to))) | (static_cast<unsigned>(from) << (8 * to));
  if (from2 >= 0) {
    pattern = (pattern & ~(0xffu << (8 * to2))) | (static_cast<unsigned>(from2) << (8 * to2));
    step |= 4u << (8 * to2);
  }
  // dword d of a 128-bit lane: its bytes are 4d .. 4d + 3 of the lane.
  const int c0 = static_cast<int>(pattern), c1 = static_cast<int>(pattern + step),
            c2 = static_cast<int>(pattern + 2 * step), c3 = static_cast<int>(pattern + 3 * step);
  return _mm512_set_epi32(c3, c2, c1, c0, c3, c2, c1, c0, c3, c2, c1, c0, c3, c2, c1, c0);
}

/// The byte `from` of each lane as an unsigned (zero-extended) int32.
inline __m512i byte_u32(__m512i v, int from) { return _mm512_shuffle_epi8(v, pick(from, 0)); }
/// The byte `from` of each lane as a signed int32.
inline __m512i byte_i32(__m512i v, int from) {
  return _mm512_srai_epi32(_mm512_shuffle_epi8(v, pick(from, 3)), 24);
}
/// Bytes `a` and `b` of each lane as a pair of signed int16 (a in the low half).
inline __m512i bytes_i16_pair(__m512i v, int a, int b) {
  return _mm512_srai_epi16(_mm512_shuffle_epi8(v, pick(a, 1, b, 3)), 8);
}
/// Bytes `a` and `b` of each lane as a pair of unsigned int16.
inline __m512i bytes_u16_pair(__m512i v, int a, int b) {
  return _mm512_shuffle_epi8(v, pick(a, 0, b, 2));
}

/// Binary16 values in the low (or high) half of each lane, as floats.
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

/// The dword at q[0] + offsets[r] + off in lane r.
inline __m512i gather32(__m512i offsets, const std::byte* q0, std::size_t off) {
  return _mm512_i32gather_epi32(offsets, q0 + off, 1);
}

/// Where the unpack functions read one block of 16 rows. Rows: the file's layout, 16 rows'
/// pointers to the block (and the same as lane offsets from row 0's, for gathers); every read
/// transposes or gathers. Packed16: the rows16 layout (kernels_impl.hpp), the start of the
/// block's 16 x block_bytes; the same registers, already in memory, so every read is a load.
struct Rows {
  const std::byte* p[16];
  __m512i offsets;
};
struct Packed16 {
  const std::byte* p;
};

/// Dwords 0..7 (load8), 0..3 (load4), 0..2 (load3) or 0 (load1) from byte `off` of the 16 rows'
/// block: out[i] lane r = bytes off + 4i .. off + 4i + 3 of row r.
[[gnu::always_inline]] inline void load8(const Rows& s, std::size_t off, __m512i out[8]) {
  transpose_16x32(s.p, off, out);
}
[[gnu::always_inline]] inline void load8(const Packed16& s, std::size_t off, __m512i out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = _mm512_loadu_si512(s.p + 16 * off + 64 * i);
}
[[gnu::always_inline]] inline void load4(const Rows& s, std::size_t off, __m512i out[4]) {
  transpose_16x16(s.p, off, out);
}
[[gnu::always_inline]] inline void load4(const Packed16& s, std::size_t off, __m512i out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = _mm512_loadu_si512(s.p + 16 * off + 64 * i);
}
/// Needs off >= 4 for Rows (it transposes the 16 bytes from off - 4, which stay in the block).
[[gnu::always_inline]] inline void load3(const Rows& s, std::size_t off, __m512i out[3]) {
  __m512i r[4];
  transpose_16x16(s.p, off - 4, r);
  for (int i = 0; i < 3; ++i) out[i] = r[i + 1];
}
[[gnu::always_inline]] inline void load3(const Packed16& s, std::size_t off, __m512i out[3]) {
  for (int i = 0; i < 3; ++i) out[i] = _mm512_loadu_si512(s.p + 16 * off + 64 * i);
}
inline __m512i load1(const Rows& s, std::size_t off) { return gather32(s.offsets, s.p[0], off); }
inline __m512i load1(const Packed16& s, std::size_t off) {
  return _mm512_loadu_si512(s.p + 16 * off);
}
/// The binary16 field at `off` (a 2-byte field of the rows16 table) as 16 floats. From the file's
/// layout a dword is gathered; at the block's end (off + 4 > Bytes) the one ending at off + 2.
template <std::size_t Bytes>
inline __m512 load_half(const Rows& s, std::size_t off) {
  return off + 4 <= Bytes ? half_lo(load1(s, off)) : half_hi(load1(s, off - 2));
}
template <std::size_t Bytes>
inline __m512 load_half(const Packed16& s, std::size_t off) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.p + 16 * off)));
}

/// The 16-entry table of IQ4_NL / IQ4_XS values + 128, in every 128-bit lane (for vpshufb).
inline __m512i iq4_table() {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8)));
}

/// Low and high nibbles of packed bytes: weights (lo) and (hi) as unsigned bytes.
inline __m512i low_nibbles(__m512i v) { return _mm512_and_si512(v, splat8(0x0f)); }
inline __m512i high_nibbles(__m512i v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), splat8(0x0f));
}

// ================================================================================================
// Blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): one block of 16 rows in 8 registers, w[k] =
// weights 4k..4k+3, then every token of the chunk with the accumulators in registers.

struct Block32 {
  __m512i w[8];
  __m512 d, m;
};

/// The fifth bits of Q5_0 / Q5_1 (qh: bit j = weight j's, one dword per lane) added as 16.
inline void add_fifth_bits(__m512i qh, __m512i w[8]) {
  for (int k = 0; k < 8; ++k) {
    // Every byte of the lane gets qh's byte k / 2, holding the bits of weights 8 (k / 2) ..
    // 8 (k / 2) + 7; byte b of the dword tests bit 4 (k % 2) + b.
    const __m512i spread = _mm512_shuffle_epi8(qh, pick(k / 2, 0, k / 2, 1));
    const __m512i all = _mm512_or_si512(spread, _mm512_slli_epi32(spread, 16));
    const int shift = 4 * (k % 2);
    const __m512i bit = _mm512_set1_epi32((1 << shift) | (2 << (shift + 8)) | (4 << (shift + 16)) |
                                          static_cast<int>(8u << (shift + 24)));
    w[k] = _mm512_mask_add_epi8(w[k], _mm512_test_epi8_mask(all, bit), w[k], splat8(16));
  }
}

/// Unpacks one block of the 16 rows.
template <DType Q, class Src>
[[gnu::always_inline]] inline void unpack32(const Src& rows, Block32& o) {
  if constexpr (Q == DType::q8_0) {
    // Signed bytes made unsigned: w ^ 0x80 = w + 128 as u8, exact for every int8 (-128 too).
    load8(rows, q8_0_qs, o.w);
    for (int k = 0; k < 8; ++k) o.w[k] = _mm512_xor_si512(o.w[k], splat8(0x80));
    o.d = load_half<q8_0_bytes>(rows, q8_0_d);
    return;
  }
  constexpr std::size_t qs = Q == DType::q4_0   ? q4_0_qs
                             : Q == DType::q4_1 ? q4_1_qs
                             : Q == DType::q5_0 ? q5_0_qs
                             : Q == DType::q5_1 ? q5_1_qs
                                                : iq4_nl_qs;
  __m512i packed[4];
  load4(rows, qs, packed);
  for (int k = 0; k < 4; ++k) {
    o.w[k] = low_nibbles(packed[k]);       // weights 4k .. 4k + 3
    o.w[k + 4] = high_nibbles(packed[k]);  // weights 16 + 4k ..
  }
  if constexpr (Q == DType::q4_1 || Q == DType::q5_1) {
    const __m512i head = load1(rows, Q == DType::q4_1 ? q4_1_d : q5_1_d);  // d | m << 16
    o.d = half_lo(head);
    o.m = half_hi(head);
  } else {
    constexpr std::size_t d = Q == DType::q4_0 ? q4_0_d : Q == DType::q5_0 ? q5_0_d : iq4_nl_d;
    o.d = load_half<quant_traits(Q).block_bytes>(rows, d);
  }
  if constexpr (Q == DType::q5_0) add_fifth_bits(load1(rows, q5_0_qh), o.w);
  if constexpr (Q == DType::q5_1) add_fifth_bits(load1(rows, q5_1_qh), o.w);
  if constexpr (Q == DType::iq4_nl) {
    const __m512i table = iq4_table();
    for (int k = 0; k < 8; ++k) o.w[k] = _mm512_shuffle_epi8(table, o.w[k]);
  }
}

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
  void prefetch_block(std::size_t b) const { prefetch(b); }
  const Rows& block(std::size_t b) {
    for (int i = 0; i < 16; ++i) rows.p[i] = w0 + offsets[i] + b * bytes;
    return rows;
  }
};

/// A group of 16 rows in the rows16 layout: one contiguous stream of 16 x row_bytes. The
/// hardware prefetchers alone leave it slow: measured on the project's Xeon with
/// specdec_bench_cpu (Qwen2.5-Coder 1.5B Q4_K_M, 2 threads, T(1)), 60-65 ms without the
/// prefetch below, 51-54 ms at 2 KiB ahead, 39-50 ms from 8 KiB to 128 KiB (the same 16 x 512
/// bytes as the file layout's Prefetcher). It reaches into the next group, up to `end`, the end
/// of the call's last group.
struct PackedGroup {
  const std::byte* g;
  std::size_t bytes;
  const std::byte* end;

  void prefetch_block(std::size_t b) const {
    const std::byte* lo = g + 16 * b * bytes + 16 * Prefetcher::ahead;
    const std::byte* hi = lo + 16 * bytes < end ? lo + 16 * bytes : end;
    for (const std::byte* p = lo; p < hi; p += 64) Prefetcher::prefetch_l2(p);
  }
  [[nodiscard]] Packed16 block(std::size_t b) const { return {g + 16 * b * bytes}; }
};

/// Lanes [lo, hi) of a group.
inline __mmask16 lane_mask(std::size_t lo, std::size_t hi) {
  return static_cast<__mmask16>(row_mask(hi) & ~row_mask(lo));
}

/// Calls f(group, lanes to store, y of the group's lane 0) for each group of 16 rows of the call.
template <class F>
void for_each_group(const QuantArgs& a, std::size_t block_bytes, F&& f) {
  if (a.rows16) {
    const std::size_t span = a.first_lane + a.rows;
    const std::byte* end = a.w + (span + 15) / 16 * 16 * a.row_bytes;
    for (std::size_t g0 = 0; g0 < span; g0 += 16) {
      PackedGroup group{a.w + g0 * a.row_bytes, block_bytes, end};
      f(group, lane_mask(g0 == 0 ? a.first_lane : 0, span - g0 < 16 ? span - g0 : 16),
        a.y + g0 - a.first_lane);
    }
    return;
  }
  for (std::size_t r0 = 0; r0 < a.rows; r0 += 16) {
    const std::size_t valid = a.rows - r0 < 16 ? a.rows - r0 : 16;
    FileGroup group(a, r0, valid, block_bytes);
    f(group, row_mask(valid), a.y + r0);
  }
}

/// One group of 16 rows against the T tokens from t0; y: the group's lane 0 for token 0.
template <DType Q, int T, class Group>
void group32(Group& group, const QuantArgs& a, std::size_t t0, __mmask16 store, float* y) {
  constexpr QuantTraits traits = quant_traits(Q);
  const std::size_t blocks = a.cols / 32;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  Block32 blk;
  for (std::size_t b = 0; b < blocks; ++b) {
    if (t0 == 0) group.prefetch_block(b);  // later token chunks find the rows in cache
    unpack32<Q>(group.block(b), blk);
    for (int t = 0; t < T; ++t) {
      const std::size_t xb = (t0 + t) * blocks + b;
      const std::int8_t* x = a.xq + (t0 + t) * a.cols + b * 32;
      // The zero point as the start value: -z * sum(x) = offset * z / 128 (offset = -128 * sum).
      __m512i isum = _mm512_setzero_si512();
      if constexpr (traits.zero_point != 0)
        isum = _mm512_srai_epi32(_mm512_set1_epi32(a.x_offsets[xb]), zero_point_shift(Q));
      for (int k = 0; k < 8; ++k) isum = dpbusd_x4(isum, blk.w[k], x + 4 * k);
      const __m512 dx = _mm512_set1_ps(a.xd[xb]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(blk.d, dx), acc[t]);
      if constexpr (traits.has_min) {
        // fma(float(sum), m dx, acc) as fma(-float(sum), -(m dx)): -sum = offset / 128 exactly.
        const __m512 neg_sum =
            _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_set1_epi32(a.x_offsets[xb]), 7));
        acc[t] = _mm512_fnmadd_ps(neg_sum, _mm512_mul_ps(blk.m, dx), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + (t0 + t) * a.ldy, store, acc[t]);
}

template <DType Q, class Group, int... T>
struct Groups32 {
  using Fn = void (*)(Group&, const QuantArgs&, std::size_t, __mmask16, float*);
  static constexpr Fn table[sizeof...(T)] = {&group32<Q, T + 1, Group>...};
};

template <DType Q>
void matmul32(const QuantArgs& a) {
  for_each_group(
      a, quant_traits(Q).block_bytes, [&]<class Group>(Group& group, __mmask16 store, float* y) {
        const auto* table =
            Groups32<Q, Group, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>::table;
        for (std::size_t t0 = 0; t0 < a.n; t0 += 16)
          table[(a.n - t0 < 16 ? a.n - t0 : 16) - 1](group, a, t0, store, y);
      });
}

// ================================================================================================
// Super-blocks of 256 (the K-quants, IQ4_XS): one super-block of 16 rows unpacked into 64
// registers' worth of L1 (w[k] = weights 4k..4k+3), with its sub-block scales as int32 lanes and
// its zero-point or min factors as int16 pairs; then the tokens in groups of up to 8, their
// integer sums in registers, their float accumulators in L1.

struct BlockK {
  __m512i w[64];
  __m512i sc[16];  ///< sub-block scales (8 or 16 used)
  /// Pairs of int16 multiplied by pairs of activation sums with vpdpwssd: subs of 16 ->
  /// (f_{2i}, f_{2i+1}) with sums of 16 (2i, 2i+1), i < 8; subs of 32 -> (f_{2i}, f_{2i+1}) with
  /// sums of 32 (2i, 2i+1), i < 4. f = -z * scale (no mins) or the min.
  __m512i zm[8];
  __m512 d, m;  ///< d, and m = -dmin for the types with mins
};

/// The unpacked weights and scales of Q4_K make the integer sum 2^4 times the block's: its high
/// nibbles stay in place, as 16 x the weight, and the low nibbles' scales are multiplied by 16
/// (one instruction less per 64 weights); the sum is shifted back, exactly.
constexpr int unpack_shift(DType q) { return q == DType::q4_k ? 4 : 0; }

/// Q4_K / Q5_K scales and mins: 8 6-bit values each from 12 bytes (kernels.hpp's table).
template <class Src>
inline void k_scales_mins(const Src& rows, BlockK& o) {
  __m512i h[4];  // d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
  static_assert(q4_k_d == q5_k_d && q4_k_scales == q5_k_scales && q4_k_scales == q4_k_d + 4);
  load4(rows, q4_k_d, h);
  o.d = half_lo(h[0]);
  o.m = _mm512_xor_ps(half_hi(h[0]), _mm512_set1_ps(-0.0f));
  // Bytes 0-3: sub-blocks 0-3, low 6 bits of scales[0..3] (mins: [4..7]); sub-blocks 4-7: the
  // nibbles of scales[8..11] plus the top two bits of scales[0..3] ([4..7]).
  const __m512i top = splat8(0x30);
  const __m512i sc_lo = _mm512_and_si512(h[1], splat8(0x3f));
  const __m512i sc_hi =
      merge(h[3], _mm512_and_si512(_mm512_srli_epi32(h[1], 2), top), splat8(0x0f));
  const __m512i mn_lo = _mm512_and_si512(h[2], splat8(0x3f));
  const __m512i mn_hi = merge(_mm512_srli_epi32(h[3], 4),
                              _mm512_and_si512(_mm512_srli_epi32(h[2], 2), top), splat8(0x0f));
  for (int j = 0; j < 4; ++j) {
    o.sc[j] = byte_u32(sc_lo, j);
    o.sc[j + 4] = byte_u32(sc_hi, j);
  }
  o.zm[0] = bytes_u16_pair(mn_lo, 0, 1);
  o.zm[1] = bytes_u16_pair(mn_lo, 2, 3);
  o.zm[2] = bytes_u16_pair(mn_hi, 0, 1);
  o.zm[3] = bytes_u16_pair(mn_hi, 2, 3);
}

template <DType Q, class Src>
requires(Q == DType::q2_k) inline void unpack_k(const Src& rows, BlockK& o) {
  __m512i s[4];  // scale bytes: low nibble the scale, high nibble the min, of sub-blocks 4i..4i+3
  load4(rows, q2_k_scales, s);
  for (int i = 0; i < 16; ++i)
    o.sc[i] = _mm512_and_si512(byte_u32(s[i / 4], i % 4), _mm512_set1_epi32(0x0f));
  for (int i = 0; i < 8; ++i)
    o.zm[i] = _mm512_srli_epi16(bytes_u16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1), 4);
  const __m512i head = load1(rows, q2_k_d);  // d | dmin << 16 (block_layout's head)
  o.d = half_lo(head);
  o.m = _mm512_xor_ps(half_hi(head), _mm512_set1_ps(-0.0f));
  // Weight 128h + 32s + l: bits 2s of qs[32h + l].
  for (int h = 0; h < 2; ++h) {
    __m512i q[8];
    load8(rows, q2_k_qs + 32 * h, q);
    for (int s2 = 0; s2 < 4; ++s2)
      for (int k = 0; k < 8; ++k)
        o.w[32 * h + 8 * s2 + k] = _mm512_and_si512(_mm512_srli_epi16(q[k], 2 * s2), splat8(0x03));
  }
}

template <DType Q, class Src>
requires(Q == DType::q3_k) inline void unpack_k(const Src& rows, BlockK& o) {
  __m512i sc[3];  // the 12 scale bytes
  load3(rows, q3_k_scales, sc);
  o.d = load_half<q3_k_bytes>(rows, q3_k_d);
  const __m512i s0 = sc[0], s1 = sc[1], s2 = sc[2];
  // Scale 4g + b: low four bits from byte b of s0 (g = 0, 2: low / high nibble) or s1 (g = 1,
  // 3), top two from bits 2g of byte b of s2; minus 32.
  for (int g = 0; g < 4; ++g) {
    const __m512i src = g % 2 == 0 ? s0 : s1;
    const __m512i low = g < 2 ? src : _mm512_srli_epi32(src, 4);
    const __m512i high =
        _mm512_and_si512(_mm512_slli_epi32(_mm512_srli_epi32(s2, 2 * g), 4), splat8(0x30));
    const __m512i scales = _mm512_sub_epi8(merge(low, high, splat8(0x0f)), splat8(32));
    for (int b = 0; b < 4; ++b) o.sc[4 * g + b] = byte_i32(scales, b);
    o.zm[2 * g] = _mm512_mullo_epi16(bytes_i16_pair(scales, 0, 1), _mm512_set1_epi16(-4));
    o.zm[2 * g + 1] = _mm512_mullo_epi16(bytes_i16_pair(scales, 2, 3), _mm512_set1_epi16(-4));
  }
  // Weight 128h + 32s + l: bits 2s of qs[32h + l], third bit: bit 4h + s of hmask[l].
  __m512i hm[8];
  load8(rows, q3_k_hmask, hm);
  for (int h = 0; h < 2; ++h) {
    __m512i q[8];
    load8(rows, q3_k_qs + 32 * h, q);
    for (int s = 0; s < 4; ++s) {
      const int bit = 4 * h + s;  // moved to bit 2
      for (int k = 0; k < 8; ++k) {
        const __m512i third =
            bit >= 2 ? _mm512_srli_epi16(hm[k], bit - 2) : _mm512_slli_epi16(hm[k], 2 - bit);
        o.w[32 * h + 8 * s + k] = merge(_mm512_srli_epi16(q[k], 2 * s),
                                        _mm512_and_si512(third, splat8(0x04)), splat8(0x03));
      }
    }
  }
}

template <DType Q, class Src>
requires(Q == DType::q4_k) inline void unpack_k(const Src& rows, BlockK& o) {
  k_scales_mins(rows, o);
  // Sub-blocks 2c and 2c + 1: the low and high nibbles of qs[32c .. 32c + 31], the high ones in
  // place (16 x the weight) and the low ones' scales times 16: the sum is 16 x the block's.
  for (int c = 0; c < 4; ++c) {
    o.sc[2 * c] = _mm512_slli_epi32(o.sc[2 * c], 4);
    __m512i q[8];
    load8(rows, q4_k_qs + 32 * c, q);
    for (int k = 0; k < 8; ++k) {
      o.w[16 * c + k] = low_nibbles(q[k]);
      o.w[16 * c + 8 + k] = _mm512_and_si512(q[k], splat8(0xf0));
    }
  }
}

/// Shifts bit `from` of every byte to bit `to` (16-bit shifts; the caller masks bit `to`).
inline __m512i move_bit(__m512i v, int from, int to) {
  return from >= to ? _mm512_srli_epi16(v, from - to) : _mm512_slli_epi16(v, to - from);
}

template <DType Q, class Src>
requires(Q == DType::q5_k) inline void unpack_k(const Src& rows, BlockK& o) {
  k_scales_mins(rows, o);
  // As Q4_K, plus bit j of qh[l] as the fifth bit of sub-block j.
  __m512i qh[8];
  load8(rows, q5_k_qh, qh);
  const __m512i bit4 = splat8(0x10);
  for (int c = 0; c < 4; ++c) {
    __m512i q[8];
    load8(rows, q5_k_qs + 32 * c, q);
    for (int k = 0; k < 8; ++k) {
      o.w[16 * c + k] =
          merge(q[k], _mm512_and_si512(move_bit(qh[k], 2 * c, 4), bit4), splat8(0x0f));
      o.w[16 * c + 8 + k] =
          merge(_mm512_srli_epi16(q[k], 4), _mm512_and_si512(move_bit(qh[k], 2 * c + 1, 4), bit4),
                splat8(0x0f));
    }
  }
}

template <DType Q, class Src>
requires(Q == DType::q6_k) inline void unpack_k(const Src& rows, BlockK& o) {
  __m512i s[4];  // the 16 int8 scales, 4 per lane
  load4(rows, q6_k_scales, s);
  for (int i = 0; i < 16; ++i) o.sc[i] = byte_i32(s[i / 4], i % 4);
  for (int i = 0; i < 8; ++i)
    o.zm[i] = _mm512_mullo_epi16(bytes_i16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1),
                                 _mm512_set1_epi16(-32));
  o.d = load_half<q6_k_bytes>(rows, q6_k_d);
  // Weight 128h + 32 part + l: low four bits from ql[64h + l + 32 (part % 2)] (low nibble for
  // part < 2, high otherwise), top two from bits 2 part of qh[32h + l].
  const __m512i top = splat8(0x30);
  for (int h = 0; h < 2; ++h) {
    __m512i ql0[8], ql1[8], qh[8];
    load8(rows, 64 * h, ql0);
    load8(rows, 64 * h + 32, ql1);
    load8(rows, q6_k_qh + 32 * h, qh);
    for (int k = 0; k < 8; ++k) {
      __m512i* w = o.w + 32 * h + k;
      w[0] = merge(ql0[k], _mm512_and_si512(_mm512_slli_epi16(qh[k], 4), top), splat8(0x0f));
      w[8] = merge(ql1[k], _mm512_and_si512(_mm512_slli_epi16(qh[k], 2), top), splat8(0x0f));
      w[16] = merge(_mm512_srli_epi16(ql0[k], 4), _mm512_and_si512(qh[k], top), splat8(0x0f));
      w[24] = merge(_mm512_srli_epi16(ql1[k], 4),
                    _mm512_and_si512(_mm512_srli_epi16(qh[k], 2), top), splat8(0x0f));
    }
  }
}

template <DType Q, class Src>
requires(Q == DType::iq4_xs) inline void unpack_k(const Src& rows, BlockK& o) {
  const __m512i head = load1(rows, iq4_xs_d);  // d | scales_h << 16
  const __m512i low = load1(rows, iq4_xs_scales_l);
  o.d = half_lo(head);
  const __m512i high = _mm512_srli_epi32(head, 16);
  const __m512i nibble = _mm512_set1_epi32(0x0f), two = _mm512_set1_epi32(0x30);
  // Sub-block j: low four bits = nibble j of scales_l, top two = bits 2j of scales_h; minus 32.
  for (int j = 0; j < 8; ++j) {
    const __m512i lo4 = _mm512_and_si512(_mm512_srli_epi32(low, 4 * j), nibble);
    const __m512i hi2 = _mm512_and_si512(
        2 * j >= 4 ? _mm512_srli_epi32(high, 2 * j - 4) : _mm512_slli_epi32(high, 4 - 2 * j), two);
    o.sc[j] = _mm512_sub_epi32(_mm512_or_si512(lo4, hi2), _mm512_set1_epi32(32));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512i pair = _mm512_or_si512(_mm512_and_si512(o.sc[2 * i], _mm512_set1_epi32(0xffff)),
                                         _mm512_slli_epi32(o.sc[2 * i + 1], 16));
    o.zm[i] = _mm512_mullo_epi16(pair, _mm512_set1_epi16(-128));
  }
  // Sub-blocks 2c, 2c + 1: 16 bytes of qs each; low nibbles weights 0-15, high 16-31.
  const __m512i table = iq4_table();
  for (int c = 0; c < 4; ++c) {
    __m512i q[8];
    load8(rows, iq4_xs_qs + 32 * c, q);
    for (int k = 0; k < 4; ++k)
      for (int sub = 0; sub < 2; ++sub) {
        __m512i* w = o.w + 16 * c + 8 * sub + k;
        w[0] = _mm512_shuffle_epi8(table, low_nibbles(q[4 * sub + k]));
        w[4] = _mm512_shuffle_epi8(table, high_nibbles(q[4 * sub + k]));
      }
  }
}

/// The end of a super-block for T tokens: isum[t] (the scaled sub-block dots) with the
/// zero-point or min terms against the activation sums, then the float steps into acc[t][lane].
template <int T, int SD, bool HasMin, int Shift>
[[gnu::always_inline]] inline void k_finish(const BlockK& o, const QuantArgs& a, std::size_t t0,
                                            std::size_t b, __m512i* isum, float* acc) {
  constexpr int nz = SD == 4 ? 8 : 4;
  const std::size_t blocks = a.cols / 256;
  for (int t = 0; t < T; ++t) {
    const std::size_t xb = (t0 + t) * blocks + b;
    const std::int16_t* sums = a.x_sums + xb * q8_k_sums + (nz == 8 ? 0 : 16);
    if constexpr (Shift != 0) isum[t] = _mm512_srai_epi32(isum[t], Shift);
    __m512i zm = HasMin ? _mm512_setzero_si512() : isum[t];
    for (int i = 0; i < nz; ++i) zm = _mm512_dpwssd_epi32(zm, o.zm[i], bcast32(sums + 2 * i));
    const __m512 dx = _mm512_set1_ps(a.xd[xb]);
    __m512 v = _mm512_load_ps(acc + 16 * t);
    v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(HasMin ? isum[t] : zm), _mm512_mul_ps(o.d, dx), v);
    if constexpr (HasMin) v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(zm), _mm512_mul_ps(o.m, dx), v);
    _mm512_store_ps(acc + 16 * t, v);
  }
}

/// T tokens from t0 (T <= 8) against super-block b of the 16 rows: acc[t][lane] += the block's
/// terms, in the documented order.
template <int T, int SD, bool HasMin, int Shift>
void k_tokens(const BlockK& o, const QuantArgs& a, std::size_t t0, std::size_t b, float* acc) {
  constexpr int subs = 64 / SD;
  const std::int8_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
  __m512i isum[T];
  for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
  for (int j = 0; j < subs; ++j) {
    // The tokens' dot products advance together, one weight register at a time: T independent
    // vpdpbusd chains in flight hide the instruction's latency (one chain per token, run one
    // after the other, left the multiply-add ports idle about a third of the time).
    __m512i dot[T];
    for (int t = 0; t < T; ++t) dot[t] = _mm512_setzero_si512();
    for (int i = 0; i < SD; ++i) {
      const __m512i w = o.w[SD * j + i];
      for (int t = 0; t < T; ++t) dot[t] = dpbusd_x4(dot[t], w, x[t] + 4 * (SD * j + i));
    }
    const __m512i sc = o.sc[j];
    for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
  }
  k_finish<T, SD, HasMin, Shift>(o, a, t0, b, isum, acc);
}

/// Q4_K for up to 8 tokens (decode, a verify): each weight register is multiplied by the T
/// tokens as soon as it is unpacked, so the block never goes through memory. The general path
/// stores the unpacked block (BlockK: 88 registers) for k_tokens to read back, which pays for
/// itself only when more than one k_tokens call (8 tokens) reads it: at n = 1 on Zen 4, where a
/// 512-bit store takes two cycles, the stores were more than half of the time (docs/benchmarks.md,
/// "an AMD Zen 4 host"); on the project's Xeon, out of L2, n = 2 / 4 / 8 take 4.2 / 6.9 / 12.7
/// µs instead of 5.9 / 8.3 / 14.2 (docs/benchmarks.md, "Fused Q4_K"). Up to 4 tokens the low and
/// high nibbles' chains run together (more independent vpdpbusd in flight); from 5 on one after
/// the other (the registers would not hold both). The same integers and float steps as unpack_k +
/// k_tokens: bitwise the same results.
template <int T, class Src>
void q4_k_fused(const Src& rows, const QuantArgs& a, std::size_t t0, std::size_t b, float* acc) {
  BlockK o;  // only the scales, mins and factors are filled
  k_scales_mins(rows, o);
  const std::int8_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
  __m512i isum[T];
  for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    // Sub-blocks 2c (low nibbles, scale x 16) and 2c + 1 (high nibbles in place), as unpack_k.
    __m512i q[8];
    load8(rows, q4_k_qs + 32 * c, q);
    if constexpr (T <= 4) {
      __m512i lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const __m512i wl = low_nibbles(q[k]), wh = _mm512_and_si512(q[k], splat8(0xf0));
        for (int t = 0; t < T; ++t) {
          lo[t] = dpbusd_x4(lo[t], wl, x[t] + 4 * (16 * c + k));
          hi[t] = dpbusd_x4(hi[t], wh, x[t] + 4 * (16 * c + 8 + k));
        }
      }
      const __m512i sl = _mm512_slli_epi32(o.sc[2 * c], 4), sh = o.sc[2 * c + 1];
      for (int t = 0; t < T; ++t) {
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(lo[t], sl));
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(hi[t], sh));
      }
      continue;
    }
    for (int half = 0; half < 2; ++half) {
      __m512i dot[T];
      for (int t = 0; t < T; ++t) dot[t] = _mm512_setzero_si512();
      for (int k = 0; k < 8; ++k) {
        const __m512i w = half == 0 ? low_nibbles(q[k]) : _mm512_and_si512(q[k], splat8(0xf0));
        for (int t = 0; t < T; ++t)
          dot[t] = dpbusd_x4(dot[t], w, x[t] + 4 * (16 * c + 8 * half + k));
      }
      const __m512i sc = half == 0 ? _mm512_slli_epi32(o.sc[2 * c], 4) : o.sc[2 * c + 1];
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
    }
  }
  constexpr QuantTraits traits = quant_traits(DType::q4_k);
  k_finish<T, traits.sub_elems / 4, traits.has_min, unpack_shift(DType::q4_k)>(o, a, t0, b, isum,
                                                                               acc);
}

using TokensFn = void (*)(const BlockK&, const QuantArgs&, std::size_t, std::size_t, float*);
template <int SD, bool HasMin, int Shift, int... T>
struct KTokens {
  static constexpr TokensFn table[sizeof...(T)] = {&k_tokens<T + 1, SD, HasMin, Shift>...};
};

constexpr std::size_t kFusedQ4K = 8;

template <DType Q>
void matmul_k(const QuantArgs& a) {
  constexpr QuantTraits traits = quant_traits(Q);
  const TokensFn* tokens =
      KTokens<traits.sub_elems / 4, traits.has_min, unpack_shift(Q), 0, 1, 2, 3, 4, 5, 6, 7>::table;
  const std::size_t blocks = a.cols / 256;
  constexpr std::size_t chunk = 64;  // tokens per pass over the weights (acc: 4 KiB)
  alignas(64) BlockK blk;
  alignas(64) float acc[chunk * 16];
  for_each_group(a, traits.block_bytes, [&]<class Group>(Group& group, __mmask16 store, float* y) {
    for (std::size_t t0 = 0; t0 < a.n; t0 += chunk) {
      const std::size_t m = a.n - t0 < chunk ? a.n - t0 : chunk;
      for (std::size_t i = 0; i < m * 16; ++i) acc[i] = 0.0f;
      for (std::size_t b = 0; b < blocks; ++b) {
        if (t0 == 0) group.prefetch_block(b);
        if constexpr (Q == DType::q4_k)
          if (m <= kFusedQ4K) {
            using Fused = void (*)(const decltype(group.block(b))&, const QuantArgs&, std::size_t,
                                   std::size_t, float*);
            static constexpr Fused fused[] = {&q4_k_fused<1>, &q4_k_fused<2>, &q4_k_fused<3>,
                                              &q4_k_fused<4>, &q4_k_fused<5>, &q4_k_fused<6>,
                                              &q4_k_fused<7>, &q4_k_fused<8>};
            fused[m - 1](group.block(b), a, t0, b, acc);
            continue;
          }
        unpack_k<Q>(group.block(b), blk);
        for (std::size_t t1 = 0; t1 < m; t1 += 8)
          tokens[(m - t1 < 8 ? m - t1 : 8) - 1](blk, a, t0 + t1, b, acc + 16 * t1);
      }
      for (std::size_t t = 0; t < m; ++t)
        _mm512_mask_storeu_ps(y + (t0 + t) * a.ldy, store, _mm512_load_ps(acc + 16 * t));
    }
  });
}

}  // namespace

void quant_matmul_avx512vnni(const QuantArgs& a) {
  with_quant_type(a.type, [&]<DType Q>() {
    if constexpr (super_blocks(Q))
      matmul_k<Q>(a);
    else
      matmul32<Q>(a);
  });
}

}  // namespace specdec::cpu::detail
