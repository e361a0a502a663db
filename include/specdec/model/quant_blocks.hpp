#pragma once
// ggml's quantised blocks: their layouts (the structs, in quant_block_layouts.hpp) and the small
// decoding helpers that every reader of them needs: the dequantisers (src/model/quants.cpp), the
// CPU kernels and the CUDA kernels. Standard library only, usable in device code (SPECDEC_HD).
//
// Value of weight i of a block (d, dmin, m: the block's binary16 scales as floats):
//   Q4_0    d * (q4 - 8)                       32 per block, q4 = nibble i % 16 of qs (low, high)
//   Q4_1    d * q4 + m
//   Q5_0    d * (q5 - 16)                      q5 = nibble | bit i of qh << 4
//   Q5_1    d * q5 + m
//   Q8_0    d * q8
//   IQ4_NL  d * kIq4NlValues[q4]
//   Q2_K    d * sc * q2 - dmin * mn           256 per block, 16 sub-blocks of 16 (4-bit sc, mn)
//   Q3_K    d * (sc - 32) * (q2 - 4 * !hbit)  16 sub-blocks of 16, 6-bit scales
//   Q4_K    d * sc * q4 - dmin * mn           8 sub-blocks of 32, 6-bit sc and mn
//   Q5_K    d * sc * q5 - dmin * mn
//   Q6_K    d * sc * (q6 - 32)                16 sub-blocks of 16, int8 scales
//   IQ4_XS  d * (ls - 32) * kIq4NlValues[q4]  8 sub-blocks of 32, 6-bit scales
// (the order of the float operations, which matters for bit-exact results, is in quants.cpp).

#include <cstddef>
#include <cstdint>

#include "specdec/common.hpp"
#include "specdec/model/quant_block_layouts.hpp"

namespace specdec::quant {

/// Q4_K / Q5_K: scale and min of sub-block j (0..7), 6 bits each, from the 12 packed bytes:
/// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 in the
/// nibbles of bytes 8-11 plus the top two bits of bytes 0-3 (scales) and 4-7 (mins).
SPECDEC_HD inline void k_scale_min(int j, const std::uint8_t* q, std::uint8_t& scale,
                                   std::uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// Q3_K: the 16 scales (already minus 32, in [-32, 31]) from the 12 packed bytes: scale i has
/// its low four bits in byte i % 8 (low nibble for i < 8, high for i >= 8) and its top two bits
/// in byte 8 + i % 4 at bit 2 * (i / 4).
SPECDEC_HD inline void q3_k_scales(const std::uint8_t* packed, int out[16]) {
  for (int i = 0; i < 16; ++i) {
    const int low = (packed[i % 8] >> (i < 8 ? 0 : 4)) & 0xF;
    const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = (low | (high << 4)) - 32;
  }
}

/// IQ4_XS: the scale of sub-block ib (0..7), minus 32, in [-32, 31].
SPECDEC_HD inline int iq4_xs_scale(const BlockIQ4XS& b, int ib) {
  const int low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * ib)) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace specdec::quant
