// AVX-512 integer kernels of the quantised types for CPUs without AVX512-VNNI (Intel Skylake-SP
// and Skylake-X), over weights repacked at load into the rows16 layout (kernels_impl.hpp): the
// algorithm of kernels_quant_vnni.hpp with 16 rows in the lanes of a zmm register
// (kernels_quant_v512.hpp), its multiply-adds written as AVX512-BW sequences, as the AVX2 kernel
// of kernels_quant_avx2_rows16.cpp writes them at 256 bits (its header comment explains why the
// template keeps Q8_0 and the IQ4 types signed and how many registers an int16 sum may take).
// Compiled with the AVX-512 flags only; kernels.cpp calls quant_matmul_avx512_rows16 for Isa
// avx512 / amx when the CPU has neither AVX512-VNNI nor AVX-VNNI.
#include "kernels_quant_v512.hpp"

namespace specdec::cpu::detail {
namespace {

/// V512Ops with vpdpbusd / vpdpwssd written in AVX512-BW.
struct V512Madd : V512Ops {
  static constexpr bool exact_u8_dot = false;

  /// Each lane's 4 unsigned bytes w (each <= 127) times the 4 int8 at x, as two int16 pair sums
  /// (|u0 x0 + u1 x1| <= 32258: exact).
  static I products_x4(I w, const std::int8_t* x) { return _mm512_maddubs_epi16(w, bcast32(x)); }
  /// The same for signed bytes w: w x = |w| (x negated where w < 0), |w| <= 128 read unsigned
  /// (-128 too) and |x| <= 127, so the pair sums stay within 2 x 128 x 127 = 32512. (AVX-512
  /// has no vpsignb; where w is 0, |w| is, so x's sign there does not matter.)
  static I products_signed_x4(I w, const std::int8_t* x) {
    const I xb = bcast32(x);
    const I signed_x = _mm512_mask_sub_epi8(xb, _mm512_movepi8_mask(w), zero(), xb);
    return _mm512_maddubs_epi16(_mm512_abs_epi8(w), signed_x);
  }
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  /// Pairs of int16 multiplied and added into int32 lanes (vpmaddwd).
  static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
  /// acc + the dot of each lane's 4 unsigned bytes w (each <= 127) with the 4 int8 at x.
  static I dpbusd_x4(I acc, I w, const std::int8_t* x) {
    return _mm512_add_epi32(acc, madd16(products_x4(w, x), _mm512_set1_epi16(1)));
  }
  /// acc + the dot of each lane's 4 signed bytes w (|w| <= 128) with the 4 int8 at x.
  static I dpbssd_x4(I acc, I w, const std::int8_t* x) {
    return _mm512_add_epi32(acc, madd16(products_signed_x4(w, x), _mm512_set1_epi16(1)));
  }
  /// acc + pairs of int16 w times the 2 int16 at s (never both -32768: exact).
  static I dpwssd_x2(I acc, I w, const std::int16_t* s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, bcast32(s)));
  }
  /// The 16 IQ4_NL / IQ4_XS values, signed, in every 128-bit lane (for vpshufb).
  static I iq4_table_i8() {
    const __m128i u8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8));
    return _mm512_broadcast_i32x4(_mm_xor_si128(u8, _mm_set1_epi8(static_cast<char>(0x80))));
  }
};

}  // namespace

void quant_matmul_avx512_rows16(const QuantArgs& a) { VnniKernel<V512Madd>::matmul(a); }

}  // namespace specdec::cpu::detail
