#pragma once
// Embedding gather: out[t, :] = table[tokens[t], :] as f32.

#include <cuda_runtime.h>

#include "kernels/types.hpp"
#include "specdec/common.hpp"

namespace specdec::cuda::kernels {

/// table: [vocab, dim] of `type`; tokens: [n] device ids; out: [n, dim] f32 (device pointers).
/// Ids are validated by the caller on the host; an id outside [0, vocab) yields a NaN row.
void embedding_gather(WeightType type, const void* table, int vocab, int dim, const token_t* tokens,
                      int n, float* out, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
