// AVX512-VNNI integer kernels of the quantised types: the algorithm of kernels_quant_vnni.hpp with
// 16 rows in the 32-bit lanes of a zmm register (kernels_quant_v512.hpp), over the rows16 layout
// or the file's layout. Compiled with the AVX-512 flags plus -mavx512vnni; kernels.cpp calls
// quant_matmul_avx512vnni only when cpu_features().avx512_vnni (on AMX machines too).
#include "kernels_quant_v512.hpp"

namespace specdec::cpu::detail {
namespace {

/// V512Ops with the VNNI multiply-adds: exact for any unsigned byte weight.
struct V512Vnni : V512Ops {
  static constexpr bool exact_u8_dot = true;
  /// acc + the 16 lanes' dot products of w's 4 unsigned bytes with the 4 signed bytes at x
  /// (broadcast). Written as assembly so that the broadcast stays an operand of vpdpbusd: GCC
  /// would load it into a register first, an extra instruction per vpdpbusd that costs about a
  /// fifth of the token loop's speed (measured on an Emerald Rapids Xeon: 66 -> 87 MACs per
  /// cycle).
  static I dpbusd_x4(I acc, I w, const std::int8_t* x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v"(acc)
            : "v"(w), "m"(*reinterpret_cast<const int*>(x)));
    return acc;
  }
  static I dpwssd_x2(I acc, I w, const std::int16_t* s) {
    return _mm512_dpwssd_epi32(acc, w, bcast32(s));
  }
};

}  // namespace

void quant_matmul_avx512vnni(const QuantArgs& a) { VnniKernel<V512Vnni>::matmul(a); }

}  // namespace specdec::cpu::detail
