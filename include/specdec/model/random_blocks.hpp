#pragma once
// Random weights of any DType, written directly as blocks: for tests and benchmarks that need
// models in every type (the values of the weights do not change timings; the types and shapes
// do), including the K-quants, which specdec does not quantise.

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/model/dtype.hpp"

namespace specdec {

/// Fills `out` (a whole number of blocks of `t`) with random weights in about [-magnitude,
/// magnitude]: the float types as uniform values, the quantised types as uniformly random bytes
/// whose binary16 scales (d, and dmin or m) are then set to finite positive values of that
/// magnitude. The same seed gives the same bytes.
void random_blocks(DType t, std::span<std::byte> out, std::uint64_t seed, float magnitude);

}  // namespace specdec
