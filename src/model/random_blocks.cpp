// Random weights as blocks of any DType: see specdec/model/random_blocks.hpp.
#include "specdec/model/random_blocks.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "specdec/common.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quant_blocks.hpp"

namespace specdec {

namespace {

/// A splitmix64 stream: fast, and good enough for weights nobody reads for their values.
struct Random {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() {  // [0, 1)
    return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
};

void put_half(std::byte* block, std::size_t offset, float value) {
  const std::uint16_t h = fp32_to_fp16(value);
  std::memcpy(block + offset, &h, 2);
}

}  // namespace

void random_blocks(DType t, std::span<std::byte> out, std::uint64_t seed, float magnitude) {
  using namespace quant;
  const std::size_t bytes = dtype_block_bytes(t);
  if (out.size() % bytes != 0)
    throw Error(fmt::format("random_blocks: {} bytes are not a whole number of {} blocks",
                            out.size(), dtype_name(t)));
  Random random{seed};
  if (is_float_dtype(t)) {
    for (std::size_t i = 0; i < out.size() / bytes; ++i) {
      const float v = magnitude * (2.0f * random.uniform() - 1.0f);
      const std::uint16_t h = t == DType::f16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      std::memcpy(out.data() + i * bytes, t == DType::f32 ? static_cast<const void*>(&v) : &h,
                  bytes);
    }
    return;
  }
  // The largest |integer factor| of a weight (quant times sub-block scale) of each type, so that
  // d = magnitude / that keeps every weight within the magnitude; the mins get half of it.
  float largest = 1.0f, min_largest = 0.0f;
  std::size_t d_at = 0, min_at = 0;
  switch (t) {
    case DType::q4_0:
      largest = 8;
      break;
    case DType::q5_0:
      largest = 16;
      break;
    case DType::q8_0:
    case DType::iq4_nl:
      largest = 127;
      break;
    case DType::q4_1:
      largest = 15, min_largest = 1, min_at = offsetof(BlockQ4_1, m);
      break;
    case DType::q5_1:
      largest = 31, min_largest = 1, min_at = offsetof(BlockQ5_1, m);
      break;
    case DType::q2_k:
      largest = 45, min_largest = 15, d_at = offsetof(BlockQ2_K, d),
      min_at = offsetof(BlockQ2_K, dmin);
      break;
    case DType::q3_k:
      largest = 128, d_at = offsetof(BlockQ3_K, d);
      break;
    case DType::q4_k:
      largest = 945, min_largest = 63, min_at = offsetof(BlockQ4_K, dmin);
      break;
    case DType::q5_k:
      largest = 1953, min_largest = 63, min_at = offsetof(BlockQ5_K, dmin);
      break;
    case DType::q6_k:
      largest = 4096, d_at = offsetof(BlockQ6_K, d);
      break;
    case DType::iq4_xs:
      largest = 4064;
      break;
    default:
      break;
  }
  for (std::size_t b = 0; b < out.size() / bytes; ++b) {
    std::byte* block = out.data() + b * bytes;
    for (std::size_t i = 0; i < bytes; i += 8) {
      const std::uint64_t r = random.next();
      std::memcpy(block + i, &r, std::min<std::size_t>(8, bytes - i));
    }
    // Scales in [magnitude / 2, magnitude] / largest: finite, positive, no two blocks alike.
    put_half(block, d_at, magnitude * (0.5f + 0.5f * random.uniform()) / largest);
    if (min_largest != 0.0f)
      put_half(block, min_at, 0.5f * magnitude * random.uniform() / min_largest);
  }
}

}  // namespace specdec
