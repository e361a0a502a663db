#pragma once
// Conversion of f32 activations to the weights' 16-bit type, the input format cuBLAS needs for
// the prefill GEMMs (cublasGemmEx has no f16 x f32 mixed product).

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/types.hpp"

namespace specdec::cuda::kernels {

/// out[i] = round_to_nearest_even(in[i]) as `type` (F16 or BF16), for count values (device
/// pointers).
void convert_f32(const float* in, std::size_t count, DType type, void* out, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
