#pragma once
// SwiGLU activation: out[t, i] = silu(gate[t, i]) * up[t, i], silu(g) = g / (1 + exp(-g)).

#include <cuda_runtime.h>

namespace specdec::cuda::kernels {

/// gate_up: [n][2 * ffn], the fused gate/up projection (gate in columns [0, ffn), up in
/// [ffn, 2 ffn)); out: [n][ffn] (device pointers).
void swiglu(const float* gate_up, int n, int ffn, float* out, cudaStream_t stream);

}  // namespace specdec::cuda::kernels
