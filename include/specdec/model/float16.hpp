#pragma once
// binary16 (IEEE half) and bfloat16 <-> binary32 conversions: the one host implementation every
// layer uses (the GGUF writer, the dequantisers, the CPU backend's scalar paths, the tests).
// Integer-only, so that no result depends on the floating-point environment. Round to nearest
// even, as the F16C instructions and numpy's astype do (tests/cli/test_convert.cpp checks every
// one of 17 million floats against F16C).

#include <bit>
#include <cstdint>

namespace specdec {

/// binary32 -> binary16 bits, round to nearest even; overflow gives +-inf, NaN one quiet NaN
/// (0x7e00 with the sign, as ggml's reference conversion).
constexpr std::uint16_t fp32_to_fp16(float value) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;
  // 65520 (0x477ff000) lies halfway between the largest half, 65504, and 2^16: ties-to-even
  // rounds it, and everything above it (infinity included), to infinity.
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
  if (magnitude < 0x38800000u) {
    // Below 2^-14, the smallest normal half: a subnormal half counts units of 2^-24. The float's
    // value is m * 2^(e - 150) with m its 24-bit significand, i.e. m * 2^(e - 126) units: shift
    // m right by 126 - e bits, rounding to nearest even. Below 2^-25 everything rounds to 0.
    const std::uint32_t e = magnitude >> 23;
    if (e < 102) return sign;
    const std::uint32_t m = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - e;  // 14 .. 24
    std::uint32_t units = m >> shift;
    const std::uint32_t rest = m & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (units & 1u))) ++units;  // may carry into 0x400: fine
    return static_cast<std::uint16_t>(sign | units);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to nearest even.
  // A carry out of the mantissa correctly bumps the exponent.
  std::uint32_t h = (magnitude >> 13) - (112u << 10);
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

/// binary16 bits -> binary32 (exact).
constexpr float fp16_to_fp32(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: mantissa * 2^-24, normalised into a float (exact).
  std::uint32_t e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

/// bfloat16 bits -> binary32 (exact: the upper half of the float).
constexpr float bf16_to_fp32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

/// binary32 -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN.
constexpr std::uint16_t fp32_to_bf16(float value) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace specdec
