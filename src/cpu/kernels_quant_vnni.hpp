// The VNNI integer kernels of the quantised types (kernels_impl.hpp, "the quantised types"), one
// algorithm for four kernels: included by kernels_quant_avx512vnni.cpp (16 lanes, zmm,
// AVX512-VNNI), kernels_quant_avx512_rows16.cpp (the same with vpdpbusd written as AVX512-BW's
// vpmaddubsw + vpmaddwd, for AVX-512 CPUs without VNNI), kernels_quant_avxvnni.cpp (8 lanes, ymm,
// AVX-VNNI) and kernels_quant_avx2_rows16.cpp (8 lanes, ymm, AVX2's vpmaddubsw + vpmaddwd for
// CPUs without VNNI), each compiled with its own flags and supplying V, the vector operations of
// its width (below, "What V supplies"; the two widths' common parts in kernels_quant_v512.hpp
// and kernels_quant_v256.hpp).
//
// Lanes = rows. A block of the group's rows is read once from memory, as registers holding in lane
// r the dword i (bytes 4i..4i+3) of row r: loaded ready from the rows16 layout of
// kernels_impl.hpp, or (AVX-512 only) transposed from the file's layout. Its bit fields are
// unpacked into unsigned 8-bit weights in the same lanes, in the weights' natural order: register
// k holds weights 4k..4k+3 of every row. Every token then multiplies that block: vpdpbusd with the
// token's 4 activation quants broadcast adds lanes x 4 products per instruction, one vpmulld
// applies the rows' sub-block scales, vpdpwssd the zero-point or min terms against the activation
// sums, and the float steps run lanes wide. Each lane computes its row's integers exactly and its
// floats in the documented order, so the results are bitwise the portable kernel's
// (kernels_quant.cpp), for any token count, row range and width.
//
// What V supplies (all static):
//  - types I (integer vector), F (float vector), Mask (the lanes a group stores); lanes;
//  - tokens32, tokens_k, fused_k, paired_q4_k: tokens per pass (what the registers hold);
//  - integer ops: zero, splat8, set1_16, set1_32, lane_pattern (four dwords repeated in every
//    128-bit lane), and_, or_, xor_, merge ((a & c) | b), shifts srli16 / slli16 / srli32 /
//    slli32 / srai16 / srai32, add8, sub8, add32, sub32, mullo16, mullo32, shuffle8, add8_where
//    (w + v in the bytes where all & bit == bit), iq4_table, dpbusd_x4 (acc + dot of w with the
//    4 int8 at x, broadcast), dpwssd_x2 (acc + pairs of w times the 2 int16 at s, broadcast);
//  - exact_u8_dot: whether dpbusd_x4 is exact for any unsigned byte w (vpdpbusd) or only for
//    w <= 127 (AVX2's vpmaddubsw, whose int16 pair sums saturate above that: 2 x 127 x 127 fits).
//    When false, the types with z = 128 (u = value + 128, up to 255) keep their weights signed
//    (signed_weights() below) and V also supplies iq4_table_i8 and dpbssd_x4 (signed w, exact
//    for |w| <= 128 against the activations' |x| <= 127), and Q4_K's high nibbles are shifted
//    down instead of multiplied by 16 in place. The super-blocks then also use V's int16 steps:
//    products_x4 / products_signed_x4 (vpmaddubsw: each lane's two int16 pair sums of the 4
//    products), add16, and madd16 (vpmaddwd), which applies a sub-block scale held as the int16
//    pair (s, s) in each lane (scale_pairs below);
//  - float ops: half_lo (binary16 in each lane's low half), cvt, set1_ps, mul, fmadd, fnmadd,
//    negate, load_ps / store_ps (aligned), store (masked, unaligned);
//  - for_each_group(a, block_bytes, f): f(group, mask, y of its lane 0) for each group of lanes
//    rows of the call; group.block(b, stream) is a source with load<N>(off, out) (out[i] lane r =
//    bytes off + 4i .. off + 4i + 3 of row r), load1(off), load_half<BlockBytes>(off) (a 2-byte
//    field of the rows16 table as floats) and prefetch(part, parts): with stream (the first pass
//    over the tokens), part `part` of `parts` of the lines ahead of block b (StreamAhead).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {

// Internal linkage, as kernels_impl.hpp's helpers: each kernel file compiles its own copy.
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces)

/// The lines of a rows16 stream to prefetch (into L2) while one block of a group is computed:
/// one block's worth, 16 x RowPrefetcher::ahead bytes past it. The hardware prefetchers alone
/// leave the stream slow: measured on the project's Xeon with specdec_bench_cpu (Qwen2.5-Coder
/// 1.5B Q4_K_M, 2 threads, T(1)), 60-65 ms without it, 51-54 ms at 2 KiB ahead, 39-50 ms from
/// 8 KiB to 128 KiB (the same 16 x 512 bytes as the file layout's RowPrefetcher).
///
/// The kernels issue them in parts spread over the block's work (a super-block: one part per
/// chunk of 8 registers), not all at its start: a burst of 36-53 prefetches waits for line fill
/// buffers, and the work queued behind it cannot overlap the stream. Spread, the 1.5B's T(1) fell
/// from 38.5-40.2 to 35.8-36.5 ms and T(5) from 53-55 to 47 (2 threads; docs/benchmarks.md,
/// "Prefetches spread over the block").
struct StreamAhead {
  const std::byte* lo = nullptr;
  std::size_t lines = 0;

  /// g the group's start, `bytes` the block's bytes, `end` the end of the call's last group (it
  /// reaches into the next group, not past that).
  static StreamAhead of_block(const std::byte* g, std::size_t bytes, const std::byte* end,
                              std::size_t b) {
    const std::byte* lo = g + 16 * b * bytes + 16 * RowPrefetcher<16>::ahead;
    const std::byte* hi = lo + 16 * bytes < end ? lo + 16 * bytes : end;
    return {lo, hi > lo ? (static_cast<std::size_t>(hi - lo) + 63) / 64 : 0};
  }
  /// Part `part` of `parts` of the lines.
  void part(std::size_t part, std::size_t parts) const {
    for (std::size_t l = lines * part / parts; l < lines * (part + 1) / parts; ++l)
      RowPrefetcher<16>::prefetch_l2(lo + 64 * l);
  }
};

/// Calls f(group, lo, hi, y, end) for each group of 16 rows of a call on the rows16 layout
/// (QuantArgs::rows16): group its start, [lo, hi) its lanes in the call's range, y the output of
/// its lane 0 for token 0, end the end of the call's last group (where prefetches stop).
template <class Fn>
void for_each_rows16_group(const QuantArgs& a, Fn&& f) {
  const std::size_t span = a.first_lane + a.rows;
  const std::byte* end = a.w + (span + 15) / 16 * 16 * a.row_bytes;
  for (std::size_t g0 = 0; g0 < span; g0 += 16)
    f(a.w + g0 * a.row_bytes, g0 == 0 ? a.first_lane : 0, span - g0 < 16 ? span - g0 : 16,
      a.y + g0 - a.first_lane, end);
}

}  // namespace

template <class V>
struct VnniKernel {
  using I = typename V::I;
  using F = typename V::F;
  using Mask = typename V::Mask;
  static constexpr int lanes = V::lanes;

  /// Whether type q's weights are unpacked signed (the value, not u = value + 128) and multiplied
  /// by dpbssd_x4 without a zero-point term: the types with z = 128 on a V whose unsigned dot is
  /// exact only up to 127. Same integer sums either way, so the same results.
  static constexpr bool signed_weights(DType q) {
    return !V::exact_u8_dot && quant_traits(q).zero_point == 128;
  }
  template <bool Signed>
  [[gnu::always_inline]] static I dot_x4(I acc, I w, const std::int8_t* x) {
    if constexpr (Signed)
      return V::dpbssd_x4(acc, w, x);
    else
      return V::dpbusd_x4(acc, w, x);
  }
  /// The super-blocks' sub-block scales as the token loop multiplies them: int32 lanes for
  /// vpmulld after vpdpbusd, or, where dpbusd is emulated, the int16 pair (s, s) in each lane:
  /// vpmaddwd then applies the scale and adds the pair sums of vpmaddubsw in one instruction
  /// (scaled_dots()).
  static constexpr bool scale_pairs = !V::exact_u8_dot;
  /// Scale from the unsigned byte j of each lane.
  static I scale_u8(I v, int j) {
    if constexpr (scale_pairs)
      return bytes_u16_pair(v, j, j);
    else
      return byte_u32(v, j);
  }
  /// Scale from the signed byte j of each lane.
  static I scale_i8(I v, int j) {
    if constexpr (scale_pairs)
      return bytes_i16_pair(v, j, j);
    else
      return byte_i32(v, j);
  }
  /// Scale from an int32 lane (|s| < 2^15).
  static I scale_i32(I s) {
    if constexpr (scale_pairs)
      return int16_pair(s, s);
    else
      return s;
  }
  /// Where dpbusd is emulated: how many weight registers of type q (sub-blocks of sd registers)
  /// one int16 sum may gather before vpmaddwd. Each register adds 2 products per int16, at most
  /// 2 x 127 x the largest weight (|w| <= 128 signed), and the sum must stay within 32767.
  static constexpr int int16_registers(DType q, int sd) {
    const int max_w = q == DType::q2_k   ? 3
                      : q == DType::q3_k ? 7
                      : q == DType::q4_k ? 15  // unpack_shift 0 here
                      : q == DType::q5_k ? 31
                      : q == DType::q6_k ? 63
                                         : 128;  // IQ4_XS, signed
    int g = 1;
    while (2 * g <= sd && 2 * (2 * g) * max_w * 127 <= 32767) g *= 2;
    return g;
  }
  template <bool Signed>
  [[gnu::always_inline]] static I products(I w, const std::int8_t* x) {
    if constexpr (Signed)
      return V::products_signed_x4(w, x);
    else
      return V::products_x4(w, x);
  }

  /// The IQ4_NL / IQ4_XS value table of the weights' form (signed or + 128).
  template <bool Signed>
  static I iq4_values() {
    if constexpr (Signed)
      return V::iq4_table_i8();
    else
      return V::iq4_table();
  }

  // ----------------------------------------------------------------------------------------------
  // Byte helpers.

  /// vpshufb control: in every dword, byte `to` <- byte `from` of the same dword (and, when
  /// from2 >= 0, byte `to2` <- byte `from2`), every other byte 0.
  static I pick(int from, int to, int from2 = -1, int to2 = -1) {
    unsigned pattern = 0x80808080u, step = 4u << (8 * to);
    pattern = (pattern & ~(0xffu << (8 * to))) | (static_cast<unsigned>(from) << (8 * to));
    if (from2 >= 0) {
      pattern = (pattern & ~(0xffu << (8 * to2))) | (static_cast<unsigned>(from2) << (8 * to2));
      step |= 4u << (8 * to2);
    }
    // dword d of a 128-bit lane: its bytes are 4d .. 4d + 3 of the lane.
    return V::lane_pattern(static_cast<int>(pattern), static_cast<int>(pattern + step),
                           static_cast<int>(pattern + 2 * step),
                           static_cast<int>(pattern + 3 * step));
  }
  /// The byte `from` of each lane as an unsigned (zero-extended) int32.
  static I byte_u32(I v, int from) { return V::shuffle8(v, pick(from, 0)); }
  /// The byte `from` of each lane as a signed int32.
  static I byte_i32(I v, int from) { return V::srai32(V::shuffle8(v, pick(from, 3)), 24); }
  /// Bytes `a` and `b` of each lane as a pair of signed int16 (a in the low half).
  static I bytes_i16_pair(I v, int a, int b) {
    return V::srai16(V::shuffle8(v, pick(a, 1, b, 3)), 8);
  }
  /// The int32 lanes lo and hi (each within int16) as the pair (lo, hi) of int16 in each lane.
  static I int16_pair(I lo, I hi) {
    return V::or_(V::and_(lo, V::set1_32(0xffff)), V::slli32(hi, 16));
  }
  /// Bytes `a` and `b` of each lane as a pair of unsigned int16.
  static I bytes_u16_pair(I v, int a, int b) { return V::shuffle8(v, pick(a, 0, b, 2)); }
  static F half_hi(I v) { return V::half_lo(V::srli32(v, 16)); }
  static I low_nibbles(I v) { return V::and_(v, V::splat8(0x0f)); }
  static I high_nibbles(I v) { return V::and_(V::srli16(v, 4), V::splat8(0x0f)); }
  /// Shifts bit `from` of every byte to bit `to` (16-bit shifts; the caller masks bit `to`).
  static I move_bit(I v, int from, int to) {
    if (from == to) return v;
    return from > to ? V::srli16(v, from - to) : V::slli16(v, to - from);
  }

  // ==============================================================================================
  // Blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL): one block of the group in 8 registers,
  // w[k] = weights 4k..4k+3, then every token of the pass with its accumulator in a register.

  struct Block32 {
    I w[8];
    F d, m;
  };

  /// The fifth bits of Q5_0 / Q5_1 (qh: bit j = weight j's, one dword per lane) added as 16.
  static void add_fifth_bits(I qh, I w[8]) {
    for (int k = 0; k < 8; ++k) {
      // Every byte of the lane gets qh's byte k / 2, holding the bits of weights 8 (k / 2) ..
      // 8 (k / 2) + 7; byte b of the dword tests bit 4 (k % 2) + b.
      const I spread = V::shuffle8(qh, pick(k / 2, 0, k / 2, 1));
      const I all = V::or_(spread, V::slli32(spread, 16));
      const int shift = 4 * (k % 2);
      const I bit = V::set1_32((1 << shift) | (2 << (shift + 8)) | (4 << (shift + 16)) |
                               static_cast<int>(8u << (shift + 24)));
      w[k] = V::add8_where(w[k], all, bit, V::splat8(16));
    }
  }

  template <DType Q, class Src>
  [[gnu::always_inline]] static void unpack32(const Src& rows, Block32& o) {
    using namespace block_layout;
    if constexpr (Q == DType::q8_0) {
      // Signed bytes made unsigned: w ^ 0x80 = w + 128 as u8, exact for every int8 (-128 too).
      rows.template load<8>(q8_0_qs, o.w);
      if constexpr (!signed_weights(Q))
        for (int k = 0; k < 8; ++k) o.w[k] = V::xor_(o.w[k], V::splat8(0x80));
      o.d = rows.template load_half<q8_0_bytes>(q8_0_d);
      return;
    }
    constexpr std::size_t qs = Q == DType::q4_0   ? q4_0_qs
                               : Q == DType::q4_1 ? q4_1_qs
                               : Q == DType::q5_0 ? q5_0_qs
                               : Q == DType::q5_1 ? q5_1_qs
                                                  : iq4_nl_qs;
    I packed[4];
    rows.template load<4>(qs, packed);
    for (int k = 0; k < 4; ++k) {
      o.w[k] = low_nibbles(packed[k]);       // weights 4k .. 4k + 3
      o.w[k + 4] = high_nibbles(packed[k]);  // weights 16 + 4k ..
    }
    if constexpr (Q == DType::q4_1 || Q == DType::q5_1) {
      const I head = rows.load1(Q == DType::q4_1 ? q4_1_d : q5_1_d);  // d | m << 16
      o.d = V::half_lo(head);
      o.m = half_hi(head);
    } else {
      constexpr std::size_t d = Q == DType::q4_0 ? q4_0_d : Q == DType::q5_0 ? q5_0_d : iq4_nl_d;
      o.d = rows.template load_half<quant_traits(Q).block_bytes>(d);
    }
    if constexpr (Q == DType::q5_0) add_fifth_bits(rows.load1(q5_0_qh), o.w);
    if constexpr (Q == DType::q5_1) add_fifth_bits(rows.load1(q5_1_qh), o.w);
    if constexpr (Q == DType::iq4_nl) {
      const I table = iq4_values<signed_weights(Q)>();
      for (int k = 0; k < 8; ++k) o.w[k] = V::shuffle8(table, o.w[k]);
    }
  }

  /// One group against the T tokens from t0; y: the group's lane 0 for token 0.
  template <DType Q, int T, class Group>
  static void group32(Group& group, const QuantArgs& a, std::size_t t0, Mask store, float* y) {
    constexpr QuantTraits traits = quant_traits(Q);
    const std::size_t blocks = a.cols / 32;
    F acc[T];
    for (int t = 0; t < T; ++t) acc[t] = V::zero_ps();
    Block32 blk;
    for (std::size_t b = 0; b < blocks; ++b) {
      const auto& rows = group.block(b, t0 == 0);  // later token passes find the rows in cache
      rows.prefetch(0, 1);
      unpack32<Q>(rows, blk);
      for (int t = 0; t < T; ++t) {
        const std::size_t xb = (t0 + t) * blocks + b;
        const std::int8_t* x = a.xq + (t0 + t) * a.cols + b * 32;
        // The zero point as the start value: -z * sum(x) = offset * z / 128 (offset = -128 sum).
        I isum = V::zero();
        if constexpr (traits.zero_point != 0 && !signed_weights(Q))
          isum = V::srai32(V::set1_32(a.x_offsets[xb]), zero_point_shift(Q));
        for (int k = 0; k < 8; ++k) isum = dot_x4<signed_weights(Q)>(isum, blk.w[k], x + 4 * k);
        const F dx = V::set1_ps(a.xd[xb]);
        acc[t] = V::fmadd(V::cvt(isum), V::mul(blk.d, dx), acc[t]);
        if constexpr (traits.has_min) {
          // fma(float(sum), m dx, acc) as fma(-float(sum), -(m dx)): -sum = offset / 128 exactly.
          const F neg_sum = V::cvt(V::srai32(V::set1_32(a.x_offsets[xb]), 7));
          acc[t] = V::fnmadd(neg_sum, V::mul(blk.m, dx), acc[t]);
        }
      }
    }
    for (int t = 0; t < T; ++t) V::store(y + (t0 + t) * a.ldy, store, acc[t]);
  }

  /// group32 for 1 .. V::tokens32 tokens.
  template <DType Q, class Group, class Seq = std::make_index_sequence<V::tokens32>>
  struct Groups32;
  template <DType Q, class Group, std::size_t... T>
  struct Groups32<Q, Group, std::index_sequence<T...>> {
    using Fn = void (*)(Group&, const QuantArgs&, std::size_t, Mask, float*);
    static constexpr Fn table[sizeof...(T)] = {&group32<Q, static_cast<int>(T) + 1, Group>...};
  };

  template <DType Q>
  static void matmul32(const QuantArgs& a) {
    constexpr std::size_t pass = V::tokens32;
    V::for_each_group(a, quant_traits(Q).block_bytes,
                      [&]<class Group>(Group& group, Mask store, float* y) {
                        const auto* table = Groups32<Q, Group>::table;
                        for (std::size_t t0 = 0; t0 < a.n; t0 += pass)
                          table[(a.n - t0 < pass ? a.n - t0 : pass) - 1](group, a, t0, store, y);
                      });
  }

  // ==============================================================================================
  // Super-blocks of 256 (the K-quants, IQ4_XS): one super-block of the group unpacked into 64
  // registers' worth of L1 (w[k] = weights 4k..4k+3), with its sub-block scales as int32 lanes
  // and its zero-point or min factors as int16 pairs; then the tokens in passes of tokens_k,
  // their integer sums in registers, their float accumulators in L1.

  struct BlockK {
    I w[64];
    I sc[16];  ///< sub-block scales (8 or 16 used)
    /// Pairs of int16 multiplied by pairs of activation sums with vpdpwssd: subs of 16 ->
    /// (f_{2i}, f_{2i+1}) with sums of 16 (2i, 2i+1), i < 8; subs of 32 -> (f_{2i}, f_{2i+1})
    /// with sums of 32 (2i, 2i+1), i < 4. f = -z * scale (no mins) or the min.
    I zm[8];
    F d, m;  ///< d, and m = -dmin for the types with mins
  };

  /// Where dpbusd takes any byte, the unpacked weights and scales of Q4_K make the integer sum
  /// 2^4 times the block's: its high nibbles stay in place, as 16 x the weight, and the low
  /// nibbles' scales are multiplied by 16 (one instruction less per 64 weights); the sum is
  /// shifted back, exactly. Else (up to 240 would saturate) the high nibbles are shifted down.
  static constexpr int unpack_shift(DType q) { return q == DType::q4_k && V::exact_u8_dot ? 4 : 0; }
  /// Q4_K's high nibbles as unpack_shift() wants them.
  static I q4_k_high(I q) {
    if constexpr (V::exact_u8_dot)
      return V::and_(q, V::splat8(0xf0));
    else
      return high_nibbles(q);
  }

  /// Q4_K / Q5_K scales and mins: 8 6-bit values each from 12 bytes (kernels.hpp's table).
  template <class Src>
  static void k_scales_mins(const Src& rows, BlockK& o) {
    using namespace block_layout;
    I h[4];  // d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]
    static_assert(q4_k_d == q5_k_d && q4_k_scales == q5_k_scales && q4_k_scales == q4_k_d + 4);
    rows.template load<4>(q4_k_d, h);
    o.d = V::half_lo(h[0]);
    o.m = V::negate(half_hi(h[0]));
    // Bytes 0-3: sub-blocks 0-3, low 6 bits of scales[0..3] (mins: [4..7]); sub-blocks 4-7: the
    // nibbles of scales[8..11] plus the top two bits of scales[0..3] ([4..7]).
    const I top = V::splat8(0x30);
    const I sc_lo = V::and_(h[1], V::splat8(0x3f));
    const I sc_hi = V::merge(h[3], V::and_(V::srli32(h[1], 2), top), V::splat8(0x0f));
    const I mn_lo = V::and_(h[2], V::splat8(0x3f));
    const I mn_hi = V::merge(V::srli32(h[3], 4), V::and_(V::srli32(h[2], 2), top), V::splat8(0x0f));
    for (int j = 0; j < 4; ++j) {
      o.sc[j] = scale_u8(sc_lo, j);
      o.sc[j + 4] = scale_u8(sc_hi, j);
    }
    o.zm[0] = bytes_u16_pair(mn_lo, 0, 1);
    o.zm[1] = bytes_u16_pair(mn_lo, 2, 3);
    o.zm[2] = bytes_u16_pair(mn_hi, 0, 1);
    o.zm[3] = bytes_u16_pair(mn_hi, 2, 3);
  }

  /// The scale side of a super-block of type Q: its sub-block scales (o.sc), zero-point or min
  /// factors (o.zm), d and m.
  template <DType Q, class Src>
  static void k_scales(const Src& rows, BlockK& o) {
    using namespace block_layout;
    if constexpr (Q == DType::q2_k) {
      I s[4];  // scale bytes: low nibble the scale, high nibble the min, of sub-blocks 4i..4i+3
      rows.template load<4>(q2_k_scales, s);
      const I low4 = V::set1_32(scale_pairs ? 0x000f000f : 0x0f);
      for (int i = 0; i < 16; ++i) o.sc[i] = V::and_(scale_u8(s[i / 4], i % 4), low4);
      for (int i = 0; i < 8; ++i)
        o.zm[i] = V::srli16(bytes_u16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1), 4);
      const I head = rows.load1(q2_k_d);  // d | dmin << 16 (block_layout's head)
      o.d = V::half_lo(head);
      o.m = V::negate(half_hi(head));
    } else if constexpr (Q == DType::q3_k) {
      I sc[3];  // the 12 scale bytes
      rows.template load<3>(q3_k_scales, sc);
      o.d = rows.template load_half<q3_k_bytes>(q3_k_d);
      // Scale 4g + b: low four bits from byte b of sc[0] (g = 0, 2: low / high nibble) or sc[1]
      // (g = 1, 3), top two from bits 2g of byte b of sc[2]; minus 32.
      for (int g = 0; g < 4; ++g) {
        const I src = g % 2 == 0 ? sc[0] : sc[1];
        const I low = g < 2 ? src : V::srli32(src, 4);
        const I high = V::and_(V::slli32(V::srli32(sc[2], 2 * g), 4), V::splat8(0x30));
        const I scales = V::sub8(V::merge(low, high, V::splat8(0x0f)), V::splat8(32));
        for (int b = 0; b < 4; ++b) o.sc[4 * g + b] = scale_i8(scales, b);
        o.zm[2 * g] = V::mullo16(bytes_i16_pair(scales, 0, 1), V::set1_16(-4));
        o.zm[2 * g + 1] = V::mullo16(bytes_i16_pair(scales, 2, 3), V::set1_16(-4));
      }
    } else if constexpr (Q == DType::q4_k || Q == DType::q5_k) {
      k_scales_mins(rows, o);
      // With unpack_shift 4, the low nibbles' scales times 16 (k_chunk: the high ones in place).
      if constexpr (unpack_shift(Q) != 0)
        for (int c = 0; c < 4; ++c) o.sc[2 * c] = V::slli32(o.sc[2 * c], unpack_shift(Q));
    } else if constexpr (Q == DType::q6_k) {
      I s[4];  // the 16 int8 scales, 4 per lane
      rows.template load<4>(q6_k_scales, s);
      for (int i = 0; i < 16; ++i) o.sc[i] = scale_i8(s[i / 4], i % 4);
      for (int i = 0; i < 8; ++i)
        o.zm[i] =
            V::mullo16(bytes_i16_pair(s[i / 2], 2 * (i % 2), 2 * (i % 2) + 1), V::set1_16(-32));
      o.d = rows.template load_half<q6_k_bytes>(q6_k_d);
    } else {
      static_assert(Q == DType::iq4_xs);
      const I head = rows.load1(iq4_xs_d);  // d | scales_h << 16
      const I low = rows.load1(iq4_xs_scales_l);
      o.d = V::half_lo(head);
      const I high = V::srli32(head, 16);
      const I nibble = V::set1_32(0x0f), two = V::set1_32(0x30);
      // Sub-block j: low four bits = nibble j of scales_l, top two = bits 2j of scales_h; - 32.
      for (int j = 0; j < 8; ++j) {
        const I lo4 = V::and_(V::srli32(low, 4 * j), nibble);
        const I hi2 =
            V::and_(2 * j >= 4 ? V::srli32(high, 2 * j - 4) : V::slli32(high, 4 - 2 * j), two);
        o.sc[j] = V::sub32(V::or_(lo4, hi2), V::set1_32(32));
      }
      // The zero-point factors -128 x scale (signed weights need none).
      if constexpr (!signed_weights(Q))
        for (int i = 0; i < 4; ++i)
          o.zm[i] = V::mullo16(int16_pair(o.sc[2 * i], o.sc[2 * i + 1]), V::set1_16(-128));
      for (int j = 0; j < 8; ++j) o.sc[j] = scale_i32(o.sc[j]);
    }
  }

  /// Q4_K's sub-blocks 2i (half 0) and 2i + 1 (half 1): the low and high nibbles of the 32 bytes
  /// qs[32i ..] in q (with unpack_shift 4 the high ones in place, 16 x the weight: 16 x the
  /// block's sum).
  static void q4_k_nibbles(const I* q, int half, I* w) {
    for (int k = 0; k < 8; ++k) w[k] = half == 0 ? low_nibbles(q[k]) : q4_k_high(q[k]);
  }

  /// Weights 32c .. 32c + 31 of a super-block of type Q (chunk c < 8: the registers w[8c ..
  /// 8c + 7] of BlockK, sub-block c of 32 or sub-blocks 2c and 2c + 1 of 16) into w[0 .. 8).
  /// One chunk at a time, so that the fused path (k_fused) multiplies each as it is unpacked.
  template <DType Q, class Src>
  [[gnu::always_inline]] static void k_chunk(const Src& rows, int c, I* w) {
    using namespace block_layout;
    if constexpr (Q == DType::q2_k) {
      // Weight 128h + 32s + l: bits 2s of qs[32h + l] (h = c / 4, s = c % 4).
      I q[8];
      rows.template load<8>(q2_k_qs + 32 * (c / 4), q);
      for (int k = 0; k < 8; ++k) w[k] = V::and_(V::srli16(q[k], 2 * (c % 4)), V::splat8(0x03));
    } else if constexpr (Q == DType::q3_k) {
      // As Q2_K, plus the third bit: bit 4h + s = c of hmask[l], moved to bit 2.
      I q[8], hm[8];
      rows.template load<8>(q3_k_qs + 32 * (c / 4), q);
      rows.template load<8>(q3_k_hmask, hm);
      for (int k = 0; k < 8; ++k)
        w[k] = V::merge(V::srli16(q[k], 2 * (c % 4)),
                        V::and_(move_bit(hm[k], c, 2), V::splat8(0x04)), V::splat8(0x03));
    } else if constexpr (Q == DType::q4_k) {
      I q[8];
      rows.template load<8>(q4_k_qs + 32 * (c / 2), q);
      q4_k_nibbles(q, c % 2, w);
    } else if constexpr (Q == DType::q5_k) {
      // As Q4_K (without the shift), plus bit c of qh[l] as the fifth bit.
      I q[8], qh[8];
      rows.template load<8>(q5_k_qs + 32 * (c / 2), q);
      rows.template load<8>(q5_k_qh, qh);
      for (int k = 0; k < 8; ++k) {
        const I nibble = c % 2 == 0 ? q[k] : V::srli16(q[k], 4);
        w[k] = V::merge(nibble, V::and_(move_bit(qh[k], c, 4), V::splat8(0x10)), V::splat8(0x0f));
      }
    } else if constexpr (Q == DType::q6_k) {
      // Weight 128h + 32 part + l (h = c / 4, part = c % 4): low four bits from ql[64h + l + 32
      // (part % 2)] (low nibble for part < 2, high otherwise), top two from bits 2 part of
      // qh[32h + l].
      const int h = c / 4, part = c % 4;
      I ql[8], qh[8];
      rows.template load<8>(64 * h + 32 * (part % 2), ql);
      rows.template load<8>(q6_k_qh + 32 * h, qh);
      for (int k = 0; k < 8; ++k) {
        const I low = part < 2 ? ql[k] : V::srli16(ql[k], 4);
        w[k] =
            V::merge(low, V::and_(move_bit(qh[k], 2 * part, 4), V::splat8(0x30)), V::splat8(0x0f));
      }
    } else {
      static_assert(Q == DType::iq4_xs);
      // Sub-block c: 16 bytes of qs[32 (c / 2) ..], the half c % 2; its low nibbles weights 0-15,
      // its high ones 16-31.
      const I table = iq4_values<signed_weights(Q)>();
      I q[4];
      rows.template load<4>(iq4_xs_qs + 32 * (c / 2) + 16 * (c % 2), q);
      for (int k = 0; k < 4; ++k) {
        w[k] = V::shuffle8(table, low_nibbles(q[k]));
        w[k + 4] = V::shuffle8(table, high_nibbles(q[k]));
      }
    }
  }

  /// A whole super-block into o (the path for more tokens than k_fused takes: the k_tokens
  /// passes read it back).
  template <DType Q, class Src>
  static void unpack_k(const Src& rows, BlockK& o) {
    k_scales<Q>(rows, o);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      rows.prefetch(c, 8);
      k_chunk<Q>(rows, c, o.w + 8 * c);
    }
  }

  /// The end of a super-block for T tokens: isum[t] (the scaled sub-block dots) with the
  /// zero-point or min terms against the activation sums (none for signed weights), then the
  /// float steps into acc[t][lane].
  template <int T, int SD, bool HasMin, int Shift, bool Signed>
  [[gnu::always_inline]] static void k_finish(const BlockK& o, const QuantArgs& a, std::size_t t0,
                                              std::size_t b, I* isum, float* acc) {
    constexpr int nz = Signed ? 0 : SD == 4 ? 8 : 4;
    const std::size_t blocks = a.cols / 256;
    for (int t = 0; t < T; ++t) {
      const std::size_t xb = (t0 + t) * blocks + b;
      const std::int16_t* sums = a.x_sums + xb * q8_k_sums + (nz == 8 ? 0 : 16);
      if constexpr (Shift != 0) isum[t] = V::srai32(isum[t], Shift);
      I zm = HasMin ? V::zero() : isum[t];
      for (int i = 0; i < nz; ++i) zm = V::dpwssd_x2(zm, o.zm[i], sums + 2 * i);
      const F dx = V::set1_ps(a.xd[xb]);
      F v = V::load_ps(acc + lanes * t);
      v = V::fmadd(V::cvt(HasMin ? isum[t] : zm), V::mul(o.d, dx), v);
      if constexpr (HasMin) v = V::fmadd(V::cvt(zm), V::mul(o.m, dx), v);
      V::store_ps(acc + lanes * t, v);
    }
  }

  /// isum[t] += sc x (the dot of the N weight registers w[0 .. N) with the activations at
  /// x[t] + off), for T tokens. The tokens' dot products advance together, one weight register
  /// at a time: T independent chains in flight hide the multiply-add's latency (one chain per
  /// token, run one after the other, left the multiply-add ports idle about a third of the
  /// time). VNNI: vpdpbusd chains, then vpmulld by the scale. Emulated: vpmaddubsw's int16 pair
  /// sums of G registers added in int16 (int16_registers()), then vpmaddwd by the scale pair.
  template <int T, int N, bool Signed, int G>
  [[gnu::always_inline]] static void scaled_dots(const I* w, const std::int8_t* const* x,
                                                 std::size_t off, I sc, I* isum) {
    if constexpr (!scale_pairs) {
      I dot[T];
      for (int t = 0; t < T; ++t) dot[t] = V::zero();
      for (int i = 0; i < N; ++i)
        for (int t = 0; t < T; ++t) dot[t] = dot_x4<Signed>(dot[t], w[i], x[t] + off + 4 * i);
      for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::mullo32(dot[t], sc));
    } else {
      static_assert(N % G == 0);
      for (int g = 0; g < N; g += G) {
        I sum16[T];
        for (int i = 0; i < G; ++i)
          for (int t = 0; t < T; ++t) {
            const I p = products<Signed>(w[g + i], x[t] + off + 4 * (g + i));
            sum16[t] = i == 0 ? p : V::add16(sum16[t], p);
          }
        for (int t = 0; t < T; ++t) isum[t] = V::add32(isum[t], V::madd16(sum16[t], sc));
      }
    }
  }

  /// T tokens from t0 against super-block b of the group: acc[t][lane] += the block's terms, in
  /// the documented order. G: int16_registers() where dpbusd is emulated.
  template <int T, int SD, bool HasMin, int Shift, bool Signed, int G>
  static void k_tokens(const BlockK& o, const QuantArgs& a, std::size_t t0, std::size_t b,
                       float* acc) {
    constexpr int subs = 64 / SD;
    const std::int8_t* x[T];
    for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
    I isum[T];
    for (int t = 0; t < T; ++t) isum[t] = V::zero();
    for (int j = 0; j < subs; ++j)
      scaled_dots<T, SD, Signed, G>(o.w + SD * j, x, std::size_t{4} * SD * j, o.sc[j], isum);
    k_finish<T, SD, HasMin, Shift, Signed>(o, a, t0, b, isum, acc);
  }

  /// A super-block of type Q for up to V::fused_k tokens (decode, a verify): each chunk of 8
  /// weight registers (k_chunk) is multiplied by the T tokens as soon as it is unpacked, so the
  /// block never goes through memory. The general path stores the unpacked block (BlockK: 88
  /// registers) for k_tokens to read back, which pays only when more than one k_tokens pass reads
  /// it: at n = 1 on Zen 4, where a 512-bit store takes two cycles, the stores were more than
  /// half of Q4_K's time (docs/benchmarks.md, "an AMD Zen 4 host"); on the project's Xeon, in L2,
  /// AVX512-VNNI Q4_K at n = 2 / 4 / 8 took 4.2 / 6.9 / 12.7 µs instead of 5.9 / 8.3 / 14.2
  /// ("Fused Q4_K"), and the other K-quants and IQ4_XS 10-30% less at n = 1 to 8 ("Every
  /// super-block fused"). Q4_K's chunks 2i and 2i + 1 are the two nibbles of the same bytes,
  /// loaded once; up to paired_q4_k tokens their chains run side by side (more independent
  /// vpdpbusd in flight; measured no faster for the other types' chunks). The same integers and
  /// float steps as unpack_k + k_tokens: bitwise the same results.
  template <DType Q, int T, class Src>
  static void k_fused(const Src& rows, const QuantArgs& a, std::size_t t0, std::size_t b,
                      float* acc) {
    constexpr QuantTraits traits = quant_traits(Q);
    constexpr int sd = traits.sub_elems / 4;  // registers per sub-block: 4 or 8
    constexpr bool is_signed = signed_weights(Q);
    constexpr int G = int16_registers(Q, sd);
    BlockK o;  // only the scales and factors are filled
    k_scales<Q>(rows, o);
    const std::int8_t* x[T];
    for (int t = 0; t < T; ++t) x[t] = a.xq + (t0 + t) * a.cols + b * 256;
    I isum[T];
    for (int t = 0; t < T; ++t) isum[t] = V::zero();
    if constexpr (Q == DType::q4_k) {
      for (int i = 0; i < 4; ++i) {
        rows.prefetch(2 * i, 8);
        rows.prefetch(2 * i + 1, 8);
        I q[8];
        rows.template load<8>(block_layout::q4_k_qs + 32 * i, q);
        if constexpr (!scale_pairs && T <= V::paired_q4_k) {
          I lo[T], hi[T];
          for (int t = 0; t < T; ++t) lo[t] = hi[t] = V::zero();
          for (int k = 0; k < 8; ++k) {
            const I wl = low_nibbles(q[k]), wh = q4_k_high(q[k]);
            for (int t = 0; t < T; ++t) {
              lo[t] = V::dpbusd_x4(lo[t], wl, x[t] + 4 * (16 * i + k));
              hi[t] = V::dpbusd_x4(hi[t], wh, x[t] + 4 * (16 * i + 8 + k));
            }
          }
          for (int t = 0; t < T; ++t) {
            isum[t] = V::add32(isum[t], V::mullo32(lo[t], o.sc[2 * i]));
            isum[t] = V::add32(isum[t], V::mullo32(hi[t], o.sc[2 * i + 1]));
          }
        } else {
          for (int half = 0; half < 2; ++half) {
            I w[8];
            q4_k_nibbles(q, half, w);
            scaled_dots<T, sd, false, G>(w, x, std::size_t{64} * i + std::size_t{32} * half,
                                         o.sc[2 * i + half], isum);
          }
        }
      }
    } else {
      // Unrolled, so that every chunk's shifts and fields are constants.
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        rows.prefetch(c, 8);
        I w[8];
        k_chunk<Q>(rows, c, w);
        for (int s = 0; s < 8 / sd; ++s) {
          const int j = 8 * c / sd + s;  // the sub-block
          scaled_dots<T, sd, is_signed, G>(w + sd * s, x, std::size_t{4} * sd * j, o.sc[j], isum);
        }
      }
    }
    k_finish<T, sd, traits.has_min, unpack_shift(Q), is_signed>(o, a, t0, b, isum, acc);
  }

  /// k_tokens of type Q for 1 .. V::tokens_k tokens.
  template <DType Q, class Seq = std::make_index_sequence<V::tokens_k>>
  struct KTokens;
  template <DType Q, std::size_t... T>
  struct KTokens<Q, std::index_sequence<T...>> {
    using Fn = void (*)(const BlockK&, const QuantArgs&, std::size_t, std::size_t, float*);
    static constexpr QuantTraits traits = quant_traits(Q);
    static constexpr Fn table[sizeof...(T)] = {
        &k_tokens<static_cast<int>(T) + 1, traits.sub_elems / 4, traits.has_min, unpack_shift(Q),
                  signed_weights(Q), int16_registers(Q, traits.sub_elems / 4)>...};
  };
  /// k_fused of type Q over blocks of type Src for 1 .. V::fused_k tokens.
  template <DType Q, class Src, class Seq = std::make_index_sequence<V::fused_k>>
  struct KFused;
  template <DType Q, class Src, std::size_t... T>
  struct KFused<Q, Src, std::index_sequence<T...>> {
    using Fn = void (*)(const Src&, const QuantArgs&, std::size_t, std::size_t, float*);
    static constexpr Fn table[sizeof...(T)] = {&k_fused<Q, static_cast<int>(T) + 1, Src>...};
  };

  /// Whether a few tokens take k_fused: always on the repacked layouts; on the file's (whose
  /// reads transpose), only for Q4_K, whose pairs of chunks share one load. The other types'
  /// chunks re-read fields they share (Q2_K's and Q3_K's packed bytes, Q3_K's, Q5_K's and
  /// Q6_K's high bits): one transpose becomes up to four. (unpack_k pays the same on the file's
  /// layout: its n = 16 Q3_K / Q5_K / Q6_K calls measured 10-15 % slower than before k_chunk.)
  template <DType Q, class Src>
  static constexpr bool fuses() {
    return Q == DType::q4_k || !Src::transposes;
  }

  template <DType Q>
  static void matmul_k(const QuantArgs& a) {
    constexpr QuantTraits traits = quant_traits(Q);
    constexpr std::size_t pass = V::tokens_k, fused = V::fused_k;
    const auto* tokens = KTokens<Q>::table;
    const std::size_t blocks = a.cols / 256;
    constexpr std::size_t chunk = 64;  // tokens per pass over the weights (acc: 64 x lanes)
    alignas(64) BlockK blk;
    alignas(64) float acc[chunk * lanes];
    V::for_each_group(a, traits.block_bytes, [&]<class Group>(Group& group, Mask store, float* y) {
      for (std::size_t t0 = 0; t0 < a.n; t0 += chunk) {
        const std::size_t m = a.n - t0 < chunk ? a.n - t0 : chunk;
        for (std::size_t i = 0; i < m * lanes; ++i) acc[i] = 0.0f;
        for (std::size_t b = 0; b < blocks; ++b) {
          const auto& rows = group.block(b, t0 == 0);  // later passes find the rows in cache
          using Src = std::remove_cvref_t<decltype(rows)>;
          if constexpr (fuses<Q, Src>())
            if (m <= fused) {
              KFused<Q, Src>::table[m - 1](rows, a, t0, b, acc);
              continue;
            }
          unpack_k<Q>(rows, blk);
          for (std::size_t t1 = 0; t1 < m; t1 += pass)
            tokens[(m - t1 < pass ? m - t1 : pass) - 1](blk, a, t0 + t1, b, acc + lanes * t1);
        }
        for (std::size_t t = 0; t < m; ++t)
          V::store(y + (t0 + t) * a.ldy, store, V::load_ps(acc + lanes * t));
      }
    });
  }

  static void matmul(const QuantArgs& a) {
    with_quant_type(a.type, [&]<DType Q>() {
      if constexpr (super_blocks(Q))
        matmul_k<Q>(a);
      else
        matmul32<Q>(a);
    });
  }
};

}  // namespace specdec::cpu::detail
