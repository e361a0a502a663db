#pragma once
// Embedding gather: out[t, :] = table[tokens[t], :] as f32, the table in any weight type (rows
// dequantised on the device, bit for bit as the model layer's dequantisers do).

#include <cuda_runtime.h>

#include "kernels/types.hpp"
#include "specdec/common.hpp"

namespace specdec::cuda::kernels {

/// table: [vocab, dim] of `type` (rows as the file stores them); tokens: [n] device ids;
/// out: [n, dim] f32 (device pointers; out 16-byte aligned for quantised types). Ids are
/// validated by the caller on the host; an id outside [0, vocab) yields a NaN row. Throws
/// specdec::Error when dim is not a multiple of the type's block size.
void embedding_gather(DType type, const void* table, int vocab, int dim, const token_t* tokens,
                      int n, float* out, cudaStream_t stream);

/// out[r][c] = W[r][c] rounded to `to` (F16 or BF16) for the `rows` rows of `cols` weights of
/// type `type` at w: the prefill path's dequantisation of a quantised matrix for cuBLAS
/// (device pointers, out 16-byte aligned). Values are the model layer's dequantised weights,
/// rounded to nearest even.
void dequantize_rows(DType type, const void* w, int rows, int cols, DType to, void* out,
                     cudaStream_t stream);

}  // namespace specdec::cuda::kernels
