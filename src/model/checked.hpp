#pragma once
// Overflow-checked arithmetic for sizes read from untrusted files. Every count, length, shape and
// offset in a model file is attacker-controlled; these return nullopt instead of wrapping around.

#include <cstdint>
#include <optional>

namespace specdec::detail {

[[nodiscard]] inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

[[nodiscard]] inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// Rounds x up to a multiple of `alignment` (a power of two), nullopt on overflow.
[[nodiscard]] inline std::optional<std::uint64_t> checked_align_up(std::uint64_t x,
                                                                   std::uint64_t alignment) {
  const auto padded = checked_add(x, alignment - 1);
  if (!padded) return std::nullopt;
  return *padded & ~(alignment - 1);
}

}  // namespace specdec::detail
