#pragma once
// Philox4x32-10, the counter-based random number generator of Random123 (Salmon, Moraes, Dror,
// Shaw: "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11).
//
// A counter-based generator has no state to carry around: the random bits are a pure function
// of (key, counter). specdec uses that to make every random decision reproducible and identical
// on the CPU and on the GPU: a uniform is named by (seed, stream, counter), where
//   seed    the run's seed (the Philox key),
//   stream  one independent sequence per batched sequence (sequence b uses stream b),
//   counter the position inside that stream (each verify call consumes a fixed block of it).
//
// Word layout (fixed; the CUDA kernels reproduce it exactly):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (counter & 0xffffffff, counter >> 32, stream & 0xffffffff, stream >> 32)
//   uniform = (first output word >> 8) * 2^-24
// The uniform keeps the 24 high bits of the first output word, so it is one of the 2^24 floats
// k * 2^-24, k = 0 ... 2^24 - 1: exactly representable in float, in [0, 1), never 1. The other
// three output words are not used (one Philox call per uniform keeps the naming trivial; the
// sampler needs only k + 1 uniforms per verify step, so the waste does not matter).

#include <cstdint>

#include "specdec/common.hpp"

namespace specdec::sampling {

/// Four 32-bit words: a Philox counter block or output block.
struct Philox4 {
  std::uint32_t v[4];
};

namespace detail {

// The Philox4x32 multipliers and Weyl key increments (Random123, philox.h).
inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

/// One Philox round: two 32x32 -> 64-bit products, their halves mixed with the other words.
SPECDEC_HD inline Philox4 philox_round(Philox4 x, std::uint32_t k0, std::uint32_t k1) {
  const std::uint64_t prod0 = std::uint64_t{kPhiloxM0} * x.v[0];
  const std::uint64_t prod1 = std::uint64_t{kPhiloxM1} * x.v[2];
  const auto hi0 = static_cast<std::uint32_t>(prod0 >> 32);
  const auto lo0 = static_cast<std::uint32_t>(prod0);
  const auto hi1 = static_cast<std::uint32_t>(prod1 >> 32);
  const auto lo1 = static_cast<std::uint32_t>(prod1);
  return Philox4{{hi1 ^ x.v[1] ^ k0, lo1, hi0 ^ x.v[3] ^ k1, lo0}};
}

}  // namespace detail

/// Philox4x32 with 10 rounds: the key is bumped by the Weyl constants between rounds.
/// Bit-exact with Random123's philox4x32(ctr, key) (checked against its known-answer vectors).
SPECDEC_HD inline Philox4 philox4x32_10(Philox4 counter, std::uint32_t key0, std::uint32_t key1) {
  Philox4 x = counter;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += detail::kPhiloxW0;
      key1 += detail::kPhiloxW1;
    }
    x = detail::philox_round(x, key0, key1);
  }
  return x;
}

/// The 24 high bits of a random word as a float in [0, 1): k * 2^-24 for k < 2^24.
SPECDEC_HD inline float uniform_from_bits(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-24f;
}

/// The uniform named (seed, stream, counter); see the word layout at the top of this file.
SPECDEC_HD inline float philox_uniform(std::uint64_t seed, std::uint64_t stream,
                                       std::uint64_t counter) {
  const Philox4 block{
      {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
       static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
  const Philox4 out = philox4x32_10(block, static_cast<std::uint32_t>(seed),
                                    static_cast<std::uint32_t>(seed >> 32));
  return uniform_from_bits(out.v[0]);
}

/// A host-side cursor over one stream: next() returns the uniform at the current counter and
/// moves it forward by one. The counter can be read, set and skipped, so a caller can hand the
/// same (seed, stream, counter) to a GPU kernel and continue afterwards.
class PhiloxStream {
 public:
  PhiloxStream(std::uint64_t seed, std::uint64_t stream, std::uint64_t counter = 0)
      : seed_(seed), stream_(stream), counter_(counter) {}

  /// The uniform at counter() (then counter() + 1).
  float next() { return philox_uniform(seed_, stream_, counter_++); }

  /// The uniform at counter() + offset, without moving the counter.
  [[nodiscard]] float peek(std::uint64_t offset) const {
    return philox_uniform(seed_, stream_, counter_ + offset);
  }

  /// Moves the counter forward by n (the uniforms in between are never drawn).
  void skip(std::uint64_t n) { counter_ += n; }
  void set_counter(std::uint64_t counter) { counter_ = counter; }

  [[nodiscard]] std::uint64_t seed() const { return seed_; }
  [[nodiscard]] std::uint64_t stream() const { return stream_; }
  [[nodiscard]] std::uint64_t counter() const { return counter_; }

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t counter_;
};

}  // namespace specdec::sampling
