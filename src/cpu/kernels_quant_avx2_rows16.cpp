// AVX2 integer kernels of the quantised types for CPUs without VNNI (AMD Zen 2 / Zen 3, Intel
// Haswell to Comet Lake; Isa avx2 on AVX-512 CPUs without VNNI such as Skylake-SP), over weights
// repacked at load into the rows16 layout (kernels_impl.hpp): the algorithm of
// kernels_quant_vnni.hpp with 8 rows in the lanes of a ymm register (kernels_quant_v256.hpp), its
// multiply-adds written as AVX2 sequences. Compiled with the AVX2 flags only; kernels.cpp calls
// quant_matmul_avx2_rows16 for Isa::avx2 and up when the CPU has neither AVX512-VNNI nor AVX-VNNI.
//
// vpdpbusd (4 unsigned bytes times 4 signed bytes, added to a dword) becomes vpmaddubsw (pairs of
// those products added into a saturating int16) + vpmaddwd against ones (pairs of int16 into a
// dword) + vpaddd. The int16 pair sum is exact while |u0 x0 + u1 x1| <= 32767: for every weight
// u <= 127 against the activations' |x| <= 127 (2 x 127 x 127 = 32258). The unsigned weights of
// the family stay below 64 (Q6_K's are the widest) except those of the types with z = 128
// (Q8_0, IQ4_NL, IQ4_XS: value + 128) and Q4_K's high nibbles in place (16 x the nibble); so
// exact_u8_dot is false, and kernels_quant_vnni.hpp keeps those types signed (multiplied by
// dpbssd_x4 below) and shifts Q4_K's high nibbles down. The integers are the same, so the results
// are bitwise those of the portable and VNNI kernels.
#include "kernels_quant_v256.hpp"

namespace specdec::cpu::detail {
namespace {

/// V256Ops with vpdpbusd / vpdpwssd written in AVX2.
struct V256Madd : V256Ops {
  static constexpr bool exact_u8_dot = false;

  /// Each lane's 4 unsigned bytes w (each <= 127) times the 4 int8 at x, as two int16 pair sums
  /// (|u0 x0 + u1 x1| <= 32258: exact).
  static I products_x4(I w, const std::int8_t* x) { return _mm256_maddubs_epi16(w, bcast32(x)); }
  /// The same for signed bytes w: w x = |w| (x signed as w, 0 where w is 0), |w| <= 128 read
  /// unsigned (-128 too) and |x| <= 127, so the pair sums stay within 2 x 128 x 127 = 32512.
  static I products_signed_x4(I w, const std::int8_t* x) {
    return _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast32(x), w));
  }
  static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  /// Pairs of int16 multiplied and added into int32 lanes (vpmaddwd).
  static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
  /// acc + the dot of each lane's 4 unsigned bytes w (each <= 127) with the 4 int8 at x.
  static I dpbusd_x4(I acc, I w, const std::int8_t* x) {
    return _mm256_add_epi32(acc, madd16(products_x4(w, x), _mm256_set1_epi16(1)));
  }
  /// acc + the dot of each lane's 4 signed bytes w (|w| <= 128) with the 4 int8 at x.
  static I dpbssd_x4(I acc, I w, const std::int8_t* x) {
    return _mm256_add_epi32(acc, madd16(products_signed_x4(w, x), _mm256_set1_epi16(1)));
  }
  /// acc + pairs of int16 w times the 2 int16 at s (never both -32768: exact).
  static I dpwssd_x2(I acc, I w, const std::int16_t* s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(w, bcast32(s)));
  }
  /// The 16 IQ4_NL / IQ4_XS values, signed, in both 128-bit lanes (for vpshufb).
  static I iq4_table_i8() {
    const __m128i u8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4_values_u8));
    return _mm256_broadcastsi128_si256(_mm_xor_si128(u8, _mm_set1_epi8(static_cast<char>(0x80))));
  }
};

}  // namespace

void quant_matmul_avx2_rows16(const QuantArgs& a) { VnniKernel<V256Madd>::matmul(a); }

}  // namespace specdec::cpu::detail
