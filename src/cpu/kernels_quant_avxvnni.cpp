// AVX-VNNI integer kernels of the quantised types, over weights repacked at load into the rows16
// layout (kernels_impl.hpp): the algorithm of kernels_quant_vnni.hpp with 8 rows in the 32-bit
// lanes of a ymm register (kernels_quant_v256.hpp). Compiled with the AVX2 flags plus -mavxvnni;
// kernels.cpp calls quant_matmul_avxvnni for Isa::avx2 only when cpu_features().avx_vnni (Intel
// client cores from Alder Lake on and the E-core Xeons, which have the VEX vpdpbusd but no
// AVX-512).
#include "kernels_quant_v256.hpp"

namespace specdec::cpu::detail {
namespace {

/// V256Ops with the VNNI multiply-adds: exact for any unsigned byte weight.
struct V256Vnni : V256Ops {
  static constexpr bool exact_u8_dot = true;
  static I dpbusd_x4(I acc, I w, const std::int8_t* x) {
    return _mm256_dpbusd_avx_epi32(acc, w, bcast32(x));
  }
  static I dpwssd_x2(I acc, I w, const std::int16_t* s) {
    return _mm256_dpwssd_avx_epi32(acc, w, bcast32(s));
  }
};

}  // namespace

void quant_matmul_avxvnni(const QuantArgs& a) { VnniKernel<V256Vnni>::matmul(a); }

}  // namespace specdec::cpu::detail
