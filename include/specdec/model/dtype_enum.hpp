#pragma once
// The DType enumeration alone (dtype.hpp has the table of the types' facts): nothing but the
// integer types, so that the CPU kernels compiled for one instruction set can name the types
// (src/cpu/kernels_impl.hpp) without pulling in standard-library templates.

#include <cstddef>
#include <cstdint>

namespace specdec {

/// The weight types specdec computes with: the float types and every type llama-quantize's
/// standard presets write (Q2_K ... Q8_0 and their _S/_M/_L mixes), plus IQ4_NL and IQ4_XS.
enum class DType : std::uint8_t {
  f32,
  f16,
  bf16,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q8_0,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  iq4_nl,
  iq4_xs,
};
inline constexpr std::size_t kDTypeCount = 15;

}  // namespace specdec
