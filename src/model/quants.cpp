// Dequantisers and quantisers of the weight types: see specdec/model/quants.hpp.
//
// Each dequantiser reads a block into its struct (quant_blocks.hpp) with memcpy and evaluates the
// value of every weight with the float operations of ggml's reference, in its order: the
// per-sub-block factors first (d * sc, dmin * m), then factor * quant [- offset]. The compiler
// must not fuse a * b - c into one instruction (sources.cmake passes -ffp-contract=off).
#include "specdec/model/quants.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "specdec/common.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quant_blocks.hpp"

namespace specdec::quant {

namespace {

template <class Block>
Block load_block(const std::byte* in, std::size_t b) {
  Block block;
  std::memcpy(&block, in + b * sizeof(Block), sizeof(Block));
  return block;
}

float half(std::uint16_t bits) { return fp16_to_fp32(bits); }

}  // namespace

// ------------------------------------------------------------------------ float types

void dequantize_row_f32(const std::byte* in, float* out, std::size_t count) {
  std::memcpy(out, in, count * sizeof(float));
}

void dequantize_row_f16(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = fp16_to_fp32(h);
  }
}

void dequantize_row_bf16(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t h = 0;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = bf16_to_fp32(h);
  }
}

// ------------------------------------------------------------------------ 32-blocks

void dequantize_row_q4_0(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockQ4_0>(in, b);
    const float d = half(block.d);
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>((block.qs[j] & 0xF) - 8);
      out[j + 16] = d * static_cast<float>((block.qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockQ4_1>(in, b);
    const float d = half(block.d), m = half(block.m);
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>(block.qs[j] & 0xF) + m;
      out[j + 16] = d * static_cast<float>(block.qs[j] >> 4) + m;
    }
  }
}

namespace {
/// The five-bit quants of a Q5_0 / Q5_1 block: low nibbles from qs, fifth bits from qh.
template <class Block>
void five_bit_quants(const Block& block, int q[kQK]) {
  std::uint32_t qh = 0;
  std::memcpy(&qh, block.qh, 4);
  for (std::size_t j = 0; j < kQK / 2; ++j) {
    q[j] = (block.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (block.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}
}  // namespace

void dequantize_row_q5_0(const std::byte* in, float* out, std::size_t count) {
  int q[kQK];
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockQ5_0>(in, b);
    const float d = half(block.d);
    five_bit_quants(block, q);
    for (std::size_t j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(q[j] - 16);
  }
}

void dequantize_row_q5_1(const std::byte* in, float* out, std::size_t count) {
  int q[kQK];
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockQ5_1>(in, b);
    const float d = half(block.d), m = half(block.m);
    five_bit_quants(block, q);
    for (std::size_t j = 0; j < kQK; ++j) out[j] = d * static_cast<float>(q[j]) + m;
  }
}

void dequantize_row_q8_0(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockQ8_0>(in, b);
    const float d = half(block.d);
    for (std::size_t j = 0; j < kQK; ++j) out[j] = static_cast<float>(block.qs[j]) * d;
  }
}

void dequantize_row_iq4_nl(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK; ++b, out += kQK) {
    const auto block = load_block<BlockIQ4NL>(in, b);
    const float d = half(block.d);
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      out[j] = d * static_cast<float>(kIq4NlValues[block.qs[j] & 0xF]);
      out[j + 16] = d * static_cast<float>(kIq4NlValues[block.qs[j] >> 4]);
    }
  }
}

// ------------------------------------------------------------------------ K-quants
// A super-block of 256 weights is processed in two halves of 128. Within a half, the 2-bit
// (Q2_K, Q3_K) and 6-bit (Q6_K) layouts take one byte of quants per weight position l < 32 and
// spread four sub-blocks over the four bit pairs / nibble+pair of that byte.

void dequantize_row_q2_k(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK_K; ++b) {
    const auto block = load_block<BlockQ2_K>(in, b);
    const float d = half(block.d), dmin = half(block.dmin);
    const std::uint8_t* q = block.qs;
    std::size_t is = 0;  // sub-block of 16
    for (std::size_t n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (std::size_t part = 0; part < 2; ++part, ++is) {  // weights l and l + 16
          const float dl = d * static_cast<float>(block.scales[is] & 0xF);
          const float ml = dmin * static_cast<float>(block.scales[is] >> 4);
          for (std::size_t l = 0; l < 16; ++l)
            *out++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_row_q3_k(const std::byte* in, float* out, std::size_t count) {
  int scales[16];
  for (std::size_t b = 0; b < count / kQK_K; ++b) {
    const auto block = load_block<BlockQ3_K>(in, b);
    const float d = half(block.d);
    q3_k_scales(block.scales, scales);
    const std::uint8_t* q = block.qs;
    std::size_t is = 0;
    unsigned mask = 1;  // the hmask bit of the current bit pair, over both halves
    for (std::size_t n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, mask <<= 1) {
        for (std::size_t part = 0; part < 2; ++part, ++is) {
          const float dl = d * static_cast<float>(scales[is]);
          for (std::size_t l = 16 * part; l < 16 * part + 16; ++l) {
            const int q3 = ((q[l] >> shift) & 3) - ((block.hmask[l] & mask) ? 0 : 4);
            *out++ = dl * static_cast<float>(q3);
          }
        }
      }
    }
  }
}

namespace {
/// Q4_K and Q5_K share their scales and their order: sub-blocks of 32 in pairs, the pair's
/// first 32 weights in the low nibbles of 32 bytes of qs and the next 32 in the high nibbles.
/// fifth_bit(l, sub) returns 16 or 0 (Q5_K) or always 0 (Q4_K).
template <class Block, class FifthBit>
void dequantize_k_32(const Block& block, float* out, FifthBit fifth_bit) {
  const float d = half(block.d), dmin = half(block.dmin);
  for (int pair = 0; pair < 4; ++pair) {
    const std::uint8_t* q = block.qs + 32 * pair;
    for (int part = 0; part < 2; ++part) {
      const int sub = 2 * pair + part;
      std::uint8_t sc = 0, m = 0;
      k_scale_min(sub, block.scales, sc, m);
      const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
      for (std::size_t l = 0; l < 32; ++l) {
        const int q4 = part == 0 ? (q[l] & 0xF) : (q[l] >> 4);
        *out++ = dl * static_cast<float>(q4 + fifth_bit(l, sub)) - ml;
      }
    }
  }
}
}  // namespace

void dequantize_row_q4_k(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK_K; ++b, out += kQK_K)
    dequantize_k_32(load_block<BlockQ4_K>(in, b), out, [](std::size_t, int) { return 0; });
}

void dequantize_row_q5_k(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK_K; ++b, out += kQK_K) {
    const auto block = load_block<BlockQ5_K>(in, b);
    // Sub-block s takes bit s of qh[l].
    dequantize_k_32(block, out,
                    [&](std::size_t l, int sub) { return ((block.qh[l] >> sub) & 1) << 4; });
  }
}

void dequantize_row_q6_k(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK_K; ++b) {
    const auto block = load_block<BlockQ6_K>(in, b);
    const float d = half(block.d);
    for (std::size_t n = 0; n < 2; ++n) {  // halves of 128
      const std::uint8_t* ql = block.ql + 64 * n;
      const std::uint8_t* qh = block.qh + 32 * n;
      const std::int8_t* sc = block.scales + 8 * n;
      float* y = out + b * kQK_K + 128 * n;
      // Weight l + 32 * part (part 0..3) of the half: low nibble of ql[l] / ql[l + 32], then high
      // nibbles; its top two bits at bit 2 * part of qh[l]. Sub-block (of 16): l / 16 + 2 * part.
      for (std::size_t l = 0; l < 32; ++l) {
        for (std::size_t part = 0; part < 4; ++part) {
          const int low = (part < 2 ? ql[l + 32 * part] & 0xF : ql[l + 32 * (part - 2)] >> 4);
          const int q6 = (low | (((qh[l] >> (2 * part)) & 3) << 4)) - 32;
          const float dl = d * static_cast<float>(sc[l / 16 + 2 * part]);
          y[l + 32 * part] = dl * static_cast<float>(q6);
        }
      }
    }
  }
}

void dequantize_row_iq4_xs(const std::byte* in, float* out, std::size_t count) {
  for (std::size_t b = 0; b < count / kQK_K; ++b) {
    const auto block = load_block<BlockIQ4XS>(in, b);
    const float d = half(block.d);
    for (int ib = 0; ib < 8; ++ib) {
      const float dl = d * static_cast<float>(iq4_xs_scale(block, ib));
      const std::uint8_t* qs = block.qs + 16 * ib;
      for (std::size_t j = 0; j < 16; ++j) {
        out[j] = dl * static_cast<float>(kIq4NlValues[qs[j] & 0xF]);
        out[j + 16] = dl * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
      }
      out += 32;
    }
  }
}

// ------------------------------------------------------------------------ quantisation

std::uint16_t quantize_block_q8_0(const float* x, std::int8_t* q) noexcept {
  float amax = 0.0f;
  for (std::size_t j = 0; j < kQK; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;  // a NaN compares false: left out
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < kQK; ++j) {
    // roundf(): halves away from zero, exact in double for |v| <= 127.5; NaN gives 0.
    const float v = x[j] * id;
    q[j] = v != v ? std::int8_t{0}
                  : static_cast<std::int8_t>(static_cast<double>(v) + (v >= 0.0f ? 0.5 : -0.5));
  }
  return fp32_to_fp16(d);
}

namespace {

void quantize_q8_0(const float* x, std::byte* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += kQK) {
    BlockQ8_0 block{};
    block.d = quantize_block_q8_0(x, block.qs);
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

/// The value of largest magnitude (the first on ties), as ggml's Q4_0 / Q5_0 quantisers pick it.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (std::size_t j = 0; j < kQK; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

/// Q4_0 (levels 16, offset 8) and Q5_0 (levels 32, offset 16): q = min(levels - 1,
/// trunc(x / d + offset + 0.5)) with d = max / -offset.
template <class Block, int Levels>
void quantize_symmetric(const float* x, std::byte* out, std::size_t blocks) {
  constexpr float offset = Levels / 2;
  for (std::size_t b = 0; b < blocks; ++b, x += kQK) {
    const float d = signed_absmax(x) / -offset;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[kQK];
    for (std::size_t j = 0; j < kQK; ++j)
      q[j] = std::min(Levels - 1,
                      static_cast<int>(static_cast<std::int8_t>(x[j] * id + (offset + 0.5f))));
    Block block{};
    block.d = fp32_to_fp16(d);
    std::uint32_t qh = 0;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      block.qs[j] = static_cast<std::uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
      qh |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
      qh |= static_cast<std::uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if constexpr (Levels == 32) std::memcpy(block.qh, &qh, 4);
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

/// Q4_1 (levels 16) and Q5_1 (levels 32): d = (max - min) / (levels - 1), m = min,
/// q = min(levels - 1, trunc((x - min) / d + 0.5)).
template <class Block, int Levels>
void quantize_affine(const float* x, std::byte* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += kQK) {
    float min = x[0], max = x[0];
    for (std::size_t j = 1; j < kQK; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / static_cast<float>(Levels - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[kQK];
    for (std::size_t j = 0; j < kQK; ++j)
      q[j] = std::min(Levels - 1,
                      static_cast<int>(static_cast<std::int8_t>((x[j] - min) * id + 0.5f)));
    Block block{};
    block.d = fp32_to_fp16(d);
    block.m = fp32_to_fp16(min);
    std::uint32_t qh = 0;
    for (std::size_t j = 0; j < kQK / 2; ++j) {
      block.qs[j] = static_cast<std::uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
      qh |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
      qh |= static_cast<std::uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if constexpr (Levels == 32) std::memcpy(block.qh, &qh, 4);
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

}  // namespace

bool can_quantize(DType t) noexcept {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q8_0:
      return true;
    default:
      return false;
  }
}

void quantize(DType t, std::span<const float> x, std::span<std::byte> out) {
  const std::size_t elems = dtype_block_elems(t), bytes = dtype_block_bytes(t);
  if (!can_quantize(t))
    throw Error(fmt::format("quantize: specdec cannot write {} weights", dtype_name(t)));
  if (x.size() % elems != 0)
    throw Error(fmt::format("quantize: {} values are not a whole number of {} blocks of {}",
                            x.size(), dtype_name(t), elems));
  const std::size_t blocks = x.size() / elems;
  if (out.size() != blocks * bytes)
    throw Error(fmt::format("quantize: {} {} blocks need {} bytes, got {}", blocks, dtype_name(t),
                            blocks * bytes, out.size()));
  const float* in = x.data();
  std::byte* o = out.data();
  switch (t) {
    case DType::f32:
      std::memcpy(o, in, x.size() * sizeof(float));
      return;
    case DType::f16:
    case DType::bf16:
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint16_t h = t == DType::f16 ? fp32_to_fp16(in[i]) : fp32_to_bf16(in[i]);
        std::memcpy(o + 2 * i, &h, 2);
      }
      return;
    case DType::q8_0:
      return quantize_q8_0(in, o, blocks);
    case DType::q4_0:
      return quantize_symmetric<BlockQ4_0, 16>(in, o, blocks);
    case DType::q5_0:
      return quantize_symmetric<BlockQ5_0, 32>(in, o, blocks);
    case DType::q4_1:
      return quantize_affine<BlockQ4_1, 16>(in, o, blocks);
    case DType::q5_1:
      return quantize_affine<BlockQ5_1, 32>(in, o, blocks);
    default:
      return;  // unreachable: can_quantize() checked
  }
}

}  // namespace specdec::quant
