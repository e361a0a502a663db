// The portable integer kernels of the quantised weight types (kernels_impl.hpp, "the quantised
// types"): the reference that the AVX2 and AVX512-VNNI kernels reproduce
// bit for bit. Each block is read into the common form of kernels.hpp's table (unsigned weights
// u, integer sub-block scales and mins, zero point z, factors d and m) from the model layer's
// block structs, then multiplied with exact integer sums.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels_impl.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quant_blocks.hpp"

namespace specdec::cpu::detail {

namespace {

using namespace quant;

/// One block in the common form: weight k = d * sc[k / 16] * (u[k] - z) + m * mn[k / 16]
/// (sc and mn per 16 weights: a sub-block of 32 repeats its values).
struct Unpacked {
  std::uint8_t u[kQK_K];
  std::int32_t sc[16];
  std::int32_t mn[16];
  std::int32_t z;
  float d, m;
  bool has_min;
};

template <class Block>
Block load(const std::byte* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

/// The low and high nibbles of 16 bytes: weights j and j + 16 of a 32-block.
void nibbles(const std::uint8_t* qs, std::uint8_t* u) {
  for (int j = 0; j < 16; ++j) {
    u[j] = qs[j] & 0xF;
    u[j + 16] = static_cast<std::uint8_t>(qs[j] >> 4);
  }
}

/// The fifth bits of Q5_0 / Q5_1: bit j of qh is weight j's.
void fifth_bits(const std::uint8_t* qh_bytes, std::uint8_t* u) {
  std::uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) u[j] = static_cast<std::uint8_t>(u[j] | (((qh >> j) & 1u) << 4));
}

/// The block at p in the common form (the same values the dequantisers of
/// src/model/quants.cpp produce: tests/cpu/test_kernels.cpp checks the products against them).
void unpack(DType type, const std::byte* p, Unpacked& o) {
  o.z = 0;
  o.m = 0.0f;
  o.has_min = false;
  for (int i = 0; i < 16; ++i) {
    o.sc[i] = 1;
    o.mn[i] = 0;
  }
  switch (type) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      __builtin_trap();  // not quantised: kernels.cpp calls only with is_quant_type types
    case DType::q8_0: {
      // u = w + 128 with the zero point 128: sum (u - 128) x = sum w x, exactly.
      const auto b = load<BlockQ8_0>(p);
      for (int j = 0; j < 32; ++j) o.u[j] = static_cast<std::uint8_t>(b.qs[j] + 128);
      o.z = 128;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::q4_0: {
      const auto b = load<BlockQ4_0>(p);
      nibbles(b.qs, o.u);
      o.z = 8;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::q4_1: {
      const auto b = load<BlockQ4_1>(p);
      nibbles(b.qs, o.u);
      o.d = fp16_to_fp32(b.d);
      o.m = fp16_to_fp32(b.m);
      o.has_min = true;
      o.mn[0] = o.mn[1] = 1;
      return;
    }
    case DType::q5_0: {
      const auto b = load<BlockQ5_0>(p);
      nibbles(b.qs, o.u);
      fifth_bits(b.qh, o.u);
      o.z = 16;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::q5_1: {
      const auto b = load<BlockQ5_1>(p);
      nibbles(b.qs, o.u);
      fifth_bits(b.qh, o.u);
      o.d = fp16_to_fp32(b.d);
      o.m = fp16_to_fp32(b.m);
      o.has_min = true;
      o.mn[0] = o.mn[1] = 1;
      return;
    }
    case DType::iq4_nl: {
      const auto b = load<BlockIQ4NL>(p);
      nibbles(b.qs, o.u);
      for (int j = 0; j < 32; ++j) o.u[j] = iq4_values_u8[o.u[j]];
      o.z = 128;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::q2_k: {
      // Weight 128h + 32s + l (half h, bit pair s, l < 32): bits 2s of qs[32h + l]; sub-block of
      // 16: 8h + 2s + l / 16, its scale in the low nibble of scales[], its min in the high one.
      const auto b = load<BlockQ2_K>(p);
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          for (int l = 0; l < 32; ++l)
            o.u[128 * h + 32 * s + l] = (b.qs[32 * h + l] >> (2 * s)) & 3;
      for (int i = 0; i < 16; ++i) {
        o.sc[i] = b.scales[i] & 0xF;
        o.mn[i] = b.scales[i] >> 4;
      }
      o.d = fp16_to_fp32(b.d);
      o.m = -fp16_to_fp32(b.dmin);
      o.has_min = true;
      return;
    }
    case DType::q3_k: {
      // As Q2_K, plus the third bit: bit 4h + s of hmask[l] (set: the quant is q2, else q2 - 4).
      const auto b = load<BlockQ3_K>(p);
      for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
          for (int l = 0; l < 32; ++l)
            o.u[128 * h + 32 * s + l] = static_cast<std::uint8_t>(
                ((b.qs[32 * h + l] >> (2 * s)) & 3) | (((b.hmask[l] >> (4 * h + s)) & 1) << 2));
      int scales[16];
      q3_k_scales(b.scales, scales);
      for (int i = 0; i < 16; ++i) o.sc[i] = scales[i];
      o.z = 4;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::q4_k:
    case DType::q5_k: {
      // Sub-block j (of 32) = 2p + part: the low (part 0) or high nibbles of qs[32p .. 32p + 31];
      // Q5_K adds bit j of qh[l] as the fifth bit.
      const bool five = type == DType::q5_k;
      const auto b4 = five ? BlockQ4_K{} : load<BlockQ4_K>(p);
      const auto b5 = five ? load<BlockQ5_K>(p) : BlockQ5_K{};
      const std::uint8_t* qs = five ? b5.qs : b4.qs;
      const std::uint8_t* scales = five ? b5.scales : b4.scales;
      for (int j = 0; j < 8; ++j) {
        for (int l = 0; l < 32; ++l) {
          const std::uint8_t byte = qs[32 * (j / 2) + l];
          int q = j % 2 == 0 ? byte & 0xF : byte >> 4;
          if (five) q |= ((b5.qh[l] >> j) & 1) << 4;
          o.u[32 * j + l] = static_cast<std::uint8_t>(q);
        }
        std::uint8_t sc = 0, mn = 0;
        k_scale_min(j, scales, sc, mn);
        o.sc[2 * j] = o.sc[2 * j + 1] = sc;
        o.mn[2 * j] = o.mn[2 * j + 1] = mn;
      }
      o.d = fp16_to_fp32(five ? b5.d : b4.d);
      o.m = -fp16_to_fp32(five ? b5.dmin : b4.dmin);
      o.has_min = true;
      return;
    }
    case DType::q6_k: {
      // Weight 128h + 32 part + l: low four bits from ql[64h + l + 32 (part % 2)] (low nibble for
      // part < 2, high otherwise), top two from bits 2 part of qh[32h + l].
      const auto b = load<BlockQ6_K>(p);
      for (int h = 0; h < 2; ++h)
        for (int part = 0; part < 4; ++part)
          for (int l = 0; l < 32; ++l) {
            const std::uint8_t lo = b.ql[64 * h + l + 32 * (part % 2)];
            const int low = part < 2 ? lo & 0xF : lo >> 4;
            const int high = (b.qh[32 * h + l] >> (2 * part)) & 3;
            o.u[128 * h + 32 * part + l] = static_cast<std::uint8_t>(low | (high << 4));
          }
      for (int i = 0; i < 16; ++i) o.sc[i] = b.scales[i];
      o.z = 32;
      o.d = fp16_to_fp32(b.d);
      return;
    }
    case DType::iq4_xs: {
      const auto b = load<BlockIQ4XS>(p);
      for (int j = 0; j < 8; ++j) {
        nibbles(b.qs + 16 * j, o.u + 32 * j);
        for (int l = 0; l < 32; ++l) o.u[32 * j + l] = iq4_values_u8[o.u[32 * j + l]];
        o.sc[2 * j] = o.sc[2 * j + 1] = iq4_xs_scale(b, j);
      }
      o.z = 128;
      o.d = fp16_to_fp32(b.d);
      return;
    }
  }
}

}  // namespace

void quant_matmul_portable(const QuantArgs& a) {
  const QuantTraits& g = quant_traits(a.type);
  const std::size_t blocks = a.cols / g.block_elems;
  std::vector<float> acc(a.n);
  Unpacked u;
  for (std::size_t r = 0; r < a.rows; ++r) {
    const std::byte* row = a.w + r * a.row_bytes;
    for (float& v : acc) v = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
      unpack(a.type, row + b * g.block_bytes, u);
      for (std::size_t t = 0; t < a.n; ++t) {
        const std::int8_t* x = a.xq + t * a.cols + b * g.block_elems;
        std::int32_t isum = 0, msum = 0;
        for (std::size_t i = 0; i < g.block_elems / 16; ++i) {
          std::int32_t dot = 0, xsum = 0;
          for (std::size_t k = 16 * i; k < 16 * i + 16; ++k) {
            dot += static_cast<std::int32_t>(u.u[k]) * x[k];
            xsum += x[k];
          }
          isum += u.sc[i] * (dot - u.z * xsum);
          msum += u.mn[i] * xsum;
        }
        const float dx = a.xd[t * blocks + b];
        acc[t] = std::fma(static_cast<float>(isum), u.d * dx, acc[t]);
        if (u.has_min) acc[t] = std::fma(static_cast<float>(msum), u.m * dx, acc[t]);
      }
    }
    for (std::size_t t = 0; t < a.n; ++t) a.y[t * a.ldy + r] = acc[t];
  }
}

}  // namespace specdec::cpu::detail
