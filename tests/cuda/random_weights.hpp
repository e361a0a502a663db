#pragma once
// Random weight matrices of every DType, as a model file would store them, for the kernel tests
// and the quantised-model Transformer tests. The float types and the 32-block types that the
// model layer can write (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) are quantised from random floats with the
// model layer's quantisers (ggml's reference quantisers); the others (the K-quants, IQ4_NL,
// IQ4_XS), for which the model layer has no quantiser, are random bytes with their f16 scales
// set to random values of a size that keeps |w| around `scale` (so every bit pattern of quants
// and sub-block scales occurs). The model layer's dequantisers turn either into the reference
// weights.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "specdec/model/dtype.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quant_blocks.hpp"
#include "specdec/model/quants.hpp"

namespace specdec::test {

namespace detail {

/// Writes a binary16 value at `offset` of every block.
inline void set_half(std::vector<std::uint8_t>& bytes, std::size_t block_bytes, std::size_t offset,
                     std::mt19937& rng, float magnitude) {
  std::uniform_real_distribution<float> size(0.5f, 1.5f);
  std::bernoulli_distribution negative(0.25);
  for (std::size_t b = 0; b + block_bytes <= bytes.size(); b += block_bytes) {
    const float v = magnitude * size(rng) * (negative(rng) ? -1.0f : 1.0f);
    const std::uint16_t h = fp32_to_fp16(v);
    std::memcpy(bytes.data() + b + offset, &h, 2);
  }
}

}  // namespace detail

/// rows x cols weights of type t (cols a multiple of its block size), as the file's bytes.
inline std::vector<std::uint8_t> random_weights(DType t, std::size_t rows, std::size_t cols,
                                                std::uint32_t seed, float scale = 1.0f) {
  using namespace quant;
  std::mt19937 rng(seed);
  const std::size_t bytes = rows * dtype_row_bytes(t, cols, "random_weights");
  std::vector<std::uint8_t> out(bytes);
  if (quant::can_quantize(t)) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> values(rows * cols);
    for (float& v : values) v = dist(rng);
    quant::quantize(t, values, std::as_writable_bytes(std::span(out)));
    return out;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : out) b = static_cast<std::uint8_t>(byte(rng));
  // The scales: |w| <= |d| * (largest sub-block scale) * (largest quant) ~ scale.
  const std::size_t bb = dtype_block_bytes(t);
  switch (t) {
    case DType::iq4_nl:
      detail::set_half(out, bb, offsetof(BlockIQ4NL, d), rng, scale / 127.0f);
      break;
    case DType::iq4_xs:
      detail::set_half(out, bb, offsetof(BlockIQ4XS, d), rng, scale / (32.0f * 127.0f));
      break;
    case DType::q2_k:
      detail::set_half(out, bb, offsetof(BlockQ2_K, d), rng, scale / (15.0f * 3.0f));
      detail::set_half(out, bb, offsetof(BlockQ2_K, dmin), rng, scale / (15.0f * 2.0f));
      break;
    case DType::q3_k:
      detail::set_half(out, bb, offsetof(BlockQ3_K, d), rng, scale / (32.0f * 4.0f));
      break;
    case DType::q4_k:
      detail::set_half(out, bb, offsetof(BlockQ4_K, d), rng, scale / (63.0f * 15.0f));
      detail::set_half(out, bb, offsetof(BlockQ4_K, dmin), rng, scale / (63.0f * 2.0f));
      break;
    case DType::q5_k:
      detail::set_half(out, bb, offsetof(BlockQ5_K, d), rng, scale / (63.0f * 31.0f));
      detail::set_half(out, bb, offsetof(BlockQ5_K, dmin), rng, scale / (63.0f * 2.0f));
      break;
    case DType::q6_k:
      detail::set_half(out, bb, offsetof(BlockQ6_K, d), rng, scale / (128.0f * 32.0f));
      break;
    default:
      break;
  }
  return out;
}

/// The model layer's dequantisation of rows x cols weights of type t.
inline std::vector<float> dequantized(DType t, const std::vector<std::uint8_t>& bytes,
                                      std::size_t rows, std::size_t cols) {
  std::vector<float> out(rows * cols);
  dequantize(t, reinterpret_cast<const std::byte*>(bytes.data()), out.data(), rows * cols);
  return out;
}

}  // namespace specdec::test
