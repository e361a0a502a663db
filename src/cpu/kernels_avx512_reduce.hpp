#pragma once
// The canonical 16-lane reduction tree of kernels.hpp ("Reduction order") in AVX-512, shared by
// kernels_avx512.cpp and kernels_avx512vnni.cpp. Include only from files compiled with the
// AVX-512 flags; the anonymous namespace gives each file its own copy, so the linker never merges
// it into code compiled for another instruction set (see kernels_impl.hpp).
#include <immintrin.h>

namespace specdec::cpu::detail {
namespace {

/// (l + l+8), then (+4), (+2), (+1).
inline float reduce(__m512 a) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

}  // namespace
}  // namespace specdec::cpu::detail
