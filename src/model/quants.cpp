// Dequantisers and quantisers of the weight types: see specdec/model/quants.hpp.
//
// Each dequantiser reads a block into its struct (quant_blocks.hpp) with memcpy and evaluates the
// value of every weight with the float operations of ggml's reference, in its order: the
// per-sub-block factors first (d * sc, dmin * m), then factor * quant [- offset]. The compiler
// must not fuse a * b - c into one instruction (sources.cmake passes -ffp-contract=off).
#include "specdec/model/quants.hpp"

#include <algorithm>
#include <bit>
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
          const std::size_t sub_block = l / 16 + 2 * part;
          const float dl = d * static_cast<float>(sc[sub_block]);
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
  constexpr float offset = static_cast<float>(Levels) / 2.0f;
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
    // ggml's rounding (add 0.5, truncate through int8), kept bit for bit: the quantised bytes
    // must equal llama-quantize's.
    for (std::size_t j = 0; j < kQK; ++j)
      q[j] = std::min(Levels - 1,  // NOLINTNEXTLINE(bugprone-incorrect-roundings)
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

// ------------------------------------------------------------------------ K-quant quantisers
// ggml's reference quantisers (quantize_row_q{2..6}_K_ref, the path llama-quantize takes when no
// importance matrix is given), with every float operation in ggml's order so that the blocks are
// byte-identical with llama.cpp's (tests/model/test_quants.cpp compares them with blocks that
// tools/make_kquant_fixtures.py had llama.cpp's ggml_quantize_chunk write). Each quantiser works
// in two stages: first it fits a scale (and a min) per sub-block on the floats, then it quantises
// those per-sub-block scales themselves (to 4, 6 or 8 bits under one binary16 super-scale) and
// finally re-derives every weight's quant from the *rounded* scales, so that the block
// reproduces what the dequantiser will compute.

/// Round to nearest, ties to even, as ggml's nearest_int: adding 1.5 * 2^23 makes the float
/// unit in the last place 1, so the addition itself rounds; the integer is read from the low
/// mantissa bits. Exact for |v| < 2^22 (ggml asserts that); any other input (NaN, huge) gives
/// some int without undefined behaviour, where a cast would have none defined.
int nearest_int(float v) {
  const float shifted = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<std::uint32_t>(shifted) & 0x007fffffu) - 0x00400000;
}

/// ggml treats a group whose largest magnitude is below this as all zero.
constexpr float kGroupMaxEps = 1e-15f;

/// The value of largest magnitude among x[0..n) (the first one on ties) and that magnitude.
struct LargestMagnitude {
  float value, magnitude;
};
LargestMagnitude largest_magnitude(int n, const float* x) {
  LargestMagnitude m{0.0f, 0.0f};
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > m.magnitude) m = {x[i], ax};
  }
  return m;
}

/// Symmetric fit of n values to integers in [-nmax, nmax - 1] (ggml's make_qx_quants with
/// rmse_type 1 and no importance weights): start from the scale that maps the value of largest
/// magnitude to -nmax, then try 18 nearby scales -(nmax + 0.1 * is) / max and keep the one that
/// maximises (sum w x l)^2 / sum w l^2 with w = x^2 (least squares weighted towards large
/// values). L receives l + nmax; returns the best least-squares scale.
float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L) {
  const auto [max, amax] = largest_magnitude(n, x);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, std::int8_t{0});
    return 0.0f;
  }
  const auto fit = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  const auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] =
          static_cast<std::int8_t>(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  fit(iscale, sumlx, suml2);
  assign(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, sumlx, suml2);
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      assign(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// Symmetric 3-bit fit of n values to [-nmax, nmax - 1] (ggml's make_q3_quants with rmse): start
/// from the absmax scale, then up to 5 sweeps of coordinate descent, each moving one quant to the
/// value that the least-squares scale of the others suggests when that improves
/// (sum w x l)^2 / sum w l^2 (w = x^2). L receives l + nmax; returns the least-squares scale.
float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L) {
  const auto [max, amax] = largest_magnitude(n, x);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, std::int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<std::int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int sweep = 0; sweep < 5; ++sweep) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0.0f)) continue;  // (NaN-safe as ggml's `if (slx > 0)`)
      float sl2 = suml2 - w * li * li;
      const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      slx += w * x[i] * static_cast<float>(new_l);
      sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<std::int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/// Affine fit of n values to scale * l - the_min with l in [0, nmax] (ggml's make_qkx2_quants):
/// start from the min-max fit (min clamped to <= 0), then try nstep + 1 scales
/// (rmin + rdelta * is + nmax) / (max - min); for each, quantise, solve the weighted least-squares
/// scale and min of those quants in closed form, and keep the fit with the smallest weighted
/// error (squared, or absolute when use_mad). Returns the scale; *the_min receives -min >= 0.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                       float* the_min, float rmin, float rdelta, int nstep, bool use_mad) {
  std::uint8_t Laux[32];
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(L, L + n, std::uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  const auto error_of = [&](float scale, float offset, const std::uint8_t* q) {
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = scale * static_cast<float>(q[i]) + offset - x[i];
      diff = use_mad ? std::fabs(diff) : diff * diff;
      error += weights[i] * diff;
    }
    return error;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<std::uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
  float best_error = error_of(scale, min, L);
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<std::uint8_t>(l);
      const float w = weights[i], fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0.0f) {  // the min must not be positive: refit the scale alone
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    const float cur_error = error_of(this_scale, this_min, Laux);
    if (cur_error < best_error) {
      std::copy(Laux, Laux + n, L);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

/// Packs 256 2-bit values (each < 4) the way Q2_K and Q3_K store them: per half of 128, byte l
/// holds values l, l + 32, l + 64, l + 96 in its four bit pairs.
void pack_2bit(const std::uint8_t* L, std::uint8_t* qs) {
  for (std::size_t j = 0; j < kQK_K; j += 128)
    for (std::size_t l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void quantize_q2_k(const float* x, std::byte* out, std::size_t blocks) {
  constexpr float q4scale = 15.0f;  // sub-block scales and mins are 4 bits
  for (std::size_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::uint8_t L[kQK_K];
    float scales[16], mins[16], weights[16];
    float max_scale = 0.0f, max_min = 0.0f;  // scales and mins are >= 0 (the min is subtracted)
    for (int j = 0; j < 16; ++j) {
      // Weighted by |x|, error measured as absolute deviation, 16 steps from -0.5.
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] =
          make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    BlockQ2_K block{};
    if (max_scale > 0.0f) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j)
        block.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
      block.d = fp32_to_fp16(max_scale / q4scale);
    }
    if (max_min > 0.0f) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j)
        block.scales[j] |= static_cast<std::uint8_t>(nearest_int(iscale * mins[j]) << 4);
      block.dmin = fp32_to_fp16(max_min / q4scale);
    }
    // Requantise with the stored (rounded) scales; a sub-block whose scale rounded to 0 keeps
    // the quants of its fit.
    for (int j = 0; j < 16; ++j) {
      const float d = half(block.d) * static_cast<float>(block.scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = half(block.dmin) * static_cast<float>(block.scales[j] >> 4);
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] =
            static_cast<std::uint8_t>(std::clamp(nearest_int((x[16 * j + i] + dm) / d), 0, 3));
    }
    pack_2bit(L, block.qs);
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

void quantize_q3_k(const float* x, std::byte* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0.0f, amax = 0.0f;  // the signed scale of largest magnitude
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    BlockQ3_K block{};
    if (max_scale != 0.0f) {
      // 6-bit signed sub-block scales: the largest maps to -32.
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l =
            std::clamp<int>(static_cast<std::int8_t>(nearest_int(iscale * scales[j])), -32, 31) +
            32;
        if (j < 8)
          block.scales[j] = static_cast<std::uint8_t>(l & 0xF);
        else
          block.scales[j - 8] |= static_cast<std::uint8_t>((l & 0xF) << 4);
        block.scales[j % 4 + 8] |= static_cast<std::uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      block.d = fp32_to_fp16(1.0f / iscale);
    }
    int stored[16];
    q3_k_scales(block.scales, stored);
    for (int j = 0; j < 16; ++j) {
      const float d = half(block.d) * static_cast<float>(stored[j]);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * j + i] =
            static_cast<std::int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    // The third bit of quant j goes to bit j / 32 of hmask[j % 32]; the low two bits to qs.
    std::uint8_t low[kQK_K];
    for (std::size_t j = 0; j < kQK_K; ++j) {
      const int l = L[j];
      if (l > 3) block.hmask[j % 32] |= static_cast<std::uint8_t>(1u << (j / 32));
      low[j] = static_cast<std::uint8_t>(l > 3 ? l - 4 : l);
    }
    pack_2bit(low, block.qs);
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

/// Q4_K (levels 16) and Q5_K (levels 32): 8 sub-blocks of 32 with an affine fit each, weighted
/// by rms(x) + |x|; the scales and mins are then stored as 6-bit multiples of the binary16 d and
/// dmin (k_scale_min's packing), and the quants re-derived from the stored values.
template <class Block, int Levels>
void quantize_k_affine(const float* x, std::byte* out, std::size_t blocks) {
  constexpr int nmax = Levels - 1;
  // ggml's search ranges: Q4_K tries 21 scales from -1, Q5_K 16 from -0.5.
  constexpr float rmin = Levels == 16 ? -1.0f : -0.5f;
  constexpr int nstep = Levels == 16 ? 20 : 15;
  for (std::size_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::uint8_t L[kQK_K];
    float scales[8], mins[8], weights[32];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + 32 * j;
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
      const float av_x = std::sqrt(sum_x2 / 32.0f);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xj[l]);
      scales[j] =
          make_qkx2_quants(32, nmax, xj, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    Block block{};
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; ++j) {
      // ggml stores the rounded value in a uint8_t before clamping: keep that wrap-around.
      const auto ls =
          std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j])));
      const auto lm =
          std::min<std::uint8_t>(63, static_cast<std::uint8_t>(nearest_int(inv_min * mins[j])));
      if (j < 4) {
        block.scales[j] = ls;
        block.scales[j + 4] = lm;
      } else {
        block.scales[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        block.scales[j - 4] |= static_cast<std::uint8_t>((ls >> 4) << 6);
        block.scales[j] |= static_cast<std::uint8_t>((lm >> 4) << 6);
      }
    }
    block.d = fp32_to_fp16(max_scale / 63.0f);
    block.dmin = fp32_to_fp16(max_min / 63.0f);
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc = 0, m = 0;
      k_scale_min(j, block.scales, sc, m);
      const float d = half(block.d) * static_cast<float>(sc);
      if (d == 0.0f) continue;
      const float dm = half(block.dmin) * static_cast<float>(m);
      for (int i = 0; i < 32; ++i)
        L[32 * j + i] =
            static_cast<std::uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
    }
    // Sub-blocks in pairs: the first's low four bits in the low nibbles of 32 bytes of qs, the
    // second's in the high nibbles; Q5_K's fifth bit of sub-block s at bit s of qh[l].
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        int q0 = L[64 * pair + l], q1 = L[64 * pair + l + 32];
        if constexpr (Levels == 32) {
          if (q0 > 15) {
            q0 -= 16;
            block.qh[l] |= static_cast<std::uint8_t>(1u << (2 * pair));
          }
          if (q1 > 15) {
            q1 -= 16;
            block.qh[l] |= static_cast<std::uint8_t>(2u << (2 * pair));
          }
        }
        block.qs[32 * pair + l] = static_cast<std::uint8_t>(q0 | (q1 << 4));
      }
    }
    std::memcpy(out + b * sizeof block, &block, sizeof block);
  }
}

void quantize_q6_k(const float* x, std::byte* out, std::size_t blocks) {
  for (std::size_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_qx_quants(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    BlockQ6_K block{};  // an all-zero block when every sub-block is (near) zero
    if (!(max_abs_scale < kGroupMaxEps)) {
      // int8 sub-block scales: the largest maps to -128.
      const float iscale = -128.0f / max_scale;
      block.d = fp32_to_fp16(1.0f / iscale);
      for (int j = 0; j < 16; ++j)
        block.scales[j] = static_cast<std::int8_t>(std::min(127, nearest_int(iscale * scales[j])));
      for (int j = 0; j < 16; ++j) {
        const float d = half(block.d) * static_cast<float>(block.scales[j]);
        if (d == 0.0f) continue;
        for (int i = 0; i < 16; ++i)
          L[16 * j + i] =
              static_cast<std::int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
      }
      // Per half of 128: value l + 32 * part (part 0..3) has its low nibble in ql[l] (parts 0,
      // 2) or ql[l + 32] (parts 1, 3), low or high, and its top two bits at bit 2 * part of qh[l].
      for (std::size_t h = 0; h < 2; ++h) {
        const std::int8_t* Lh = L + 128 * h;
        std::uint8_t* ql = block.ql + 64 * h;
        std::uint8_t* qh = block.qh + 32 * h;
        for (std::size_t l = 0; l < 32; ++l) {
          const int q[4] = {Lh[l], Lh[l + 32], Lh[l + 64], Lh[l + 96]};
          ql[l] = static_cast<std::uint8_t>((q[0] & 0xF) | ((q[2] & 0xF) << 4));
          ql[l + 32] = static_cast<std::uint8_t>((q[1] & 0xF) | ((q[3] & 0xF) << 4));
          qh[l] = static_cast<std::uint8_t>((q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) |
                                            ((q[3] >> 4) << 6));
        }
      }
    }
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
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
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
    case DType::q2_k:
      return quantize_q2_k(in, o, blocks);
    case DType::q3_k:
      return quantize_q3_k(in, o, blocks);
    case DType::q4_k:
      return quantize_k_affine<BlockQ4_K, 16>(in, o, blocks);
    case DType::q5_k:
      return quantize_k_affine<BlockQ5_K, 32>(in, o, blocks);
    case DType::q6_k:
      return quantize_q6_k(in, o, blocks);
    default:
      return;  // unreachable: can_quantize() checked
  }
}

}  // namespace specdec::quant
