#include <immintrin.h>

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
void quant_matmul_avx512vnni(const QuantArgs& a) { quant_matmul_portable(a); }
}  // namespace specdec::cpu::detail
