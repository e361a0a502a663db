#pragma once
// The constants of Cephes' expf, shared by every vectorised exp in specdec: the CPU backend's
// softmax (src/cpu/kernels_impl.hpp and its per-ISA files) and the sampling core's weight pass
// (specdec/sampling/weight_pass.inc).
//
//   exp(x) = 2^n * e^r,  n = round(x * log2e) (adding and subtracting round_magic),
//   r = (x - n * ln2_hi) - n * ln2_lo   (Cody-Waite: ln2 in two parts, n * ln2_hi exact),
//   e^r ~ ((((p0 r + p1) r + p2) r + p3) r + p4) r + p5) r^2 + r + 1   (|r| <= ln2 / 2, ~1 ulp).

namespace specdec::cephes_exp {

inline constexpr float log2e = 1.44269504088896341f;
inline constexpr float ln2_hi = 0.693359375f;
inline constexpr float ln2_lo = -2.12194440e-4f;
inline constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float p0 = 1.9875691500e-4f;
inline constexpr float p1 = 1.3981999507e-3f;
inline constexpr float p2 = 8.3334519073e-3f;
inline constexpr float p3 = 4.1665795894e-2f;
inline constexpr float p4 = 1.6666665459e-1f;
inline constexpr float p5 = 5.0000001201e-1f;

}  // namespace specdec::cephes_exp
