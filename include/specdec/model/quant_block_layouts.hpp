#pragma once
// The byte layouts of ggml's quantised blocks (ggml-common.h): one struct per type, the one
// statement of where each field lies. quant_blocks.hpp adds the decoding helpers; this header
// holds only the structs and constants, with no function and nothing from the standard library
// but the integer types, so that the CPU kernels compiled for one instruction set
// (src/cpu/kernels_impl.hpp) take their byte offsets from the structs themselves (offsetof)
// without pulling in inline functions that the linker could share between instruction sets.
//
// Scales are stored as binary16 bits (uint16). Every block size is even and GGUF aligns tensor
// data to 32 bytes, so a block in a mapped file is always 2-byte aligned.

#include <cstddef>
#include <cstdint>

namespace specdec::quant {

inline constexpr std::size_t kQK = 32;     ///< weights per block of the 32-blocks (Q4_0 ... Q8_0)
inline constexpr std::size_t kQK_K = 256;  ///< weights per super-block of the K-quants

struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];  ///< weight j in the low nibble of byte j, weight j + 16 in the high
};
struct BlockQ4_1 {
  std::uint16_t d, m;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];        ///< bit j: the fifth bit of weight j (a little-endian uint32)
  std::uint8_t qs[kQK / 2];  ///< low four bits, as in Q4_0
};
struct BlockQ5_1 {
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[kQK];
};
struct BlockIQ4NL {
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];  ///< indices into kIq4NlValues, nibbles as in Q4_0
};
struct BlockQ2_K {
  std::uint8_t scales[kQK_K / 16];  ///< per sub-block of 16: scale (low nibble), min (high)
  std::uint8_t qs[kQK_K / 4];       ///< 2-bit quants, see quants.cpp for the order
  std::uint16_t d, dmin;
};
struct BlockQ3_K {
  std::uint8_t hmask[kQK_K / 8];  ///< the third bit of each quant (set: no -4)
  std::uint8_t qs[kQK_K / 4];     ///< low two bits
  std::uint8_t scales[12];        ///< 16 6-bit scales, packed (q3_k_scales)
  std::uint16_t d;
};
struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];  ///< 8 6-bit scales and 8 6-bit mins, packed (k_scale_min)
  std::uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];  ///< low four bits
  std::uint8_t qh[kQK_K / 4];  ///< high two bits
  std::int8_t scales[kQK_K / 16];
  std::uint16_t d;
};
struct BlockIQ4XS {
  std::uint16_t d;
  std::uint16_t scales_h;             ///< high two bits of the 8 6-bit scales
  std::uint8_t scales_l[kQK_K / 64];  ///< low four bits, two scales per byte
  std::uint8_t qs[kQK_K / 2];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockIQ4NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4XS) == 136);

/// The 16 values of IQ4_NL and IQ4_XS (a non-uniform 4-bit grid).
inline constexpr std::int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace specdec::quant
