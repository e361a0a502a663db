#pragma once
// Host-visible vocabulary of the kernels' launch functions (no CUDA header needed).
//
// Weight matrices and the embedding table are stored on the device in their file's type, and the
// KV cache in its KvType: the model layer's DType and KvType (specdec/model/dtype.hpp), one table
// for both backends.

#include <cstdint>

#include "specdec/model/dtype.hpp"

namespace specdec::cuda {

/// Whether t is one of the 16-bit types cuBLAS multiplies (the prefill path's input types).
constexpr bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace specdec::cuda
