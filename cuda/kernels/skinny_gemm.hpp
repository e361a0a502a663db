#pragma once
// The memory-bound matrix product of decode and verify steps: y = x W^T for n <= 16 rows of
// activations,
//   W: [out][in] weights of any DType, stored as the model file stores them (quantised blocks
//      included: row r at w + r * dtype_row_bytes(type, in)); x: [n][in] f32; y: [n][ldy] f32.
// Each weight byte is read once from memory; each weight is dequantised in registers exactly as
// the model layer's dequantiser computes it (bit for bit) and products accumulate in f32 with
// fused multiply-adds.
//
// Batch invariance: y[t][r] is bitwise the same for any n (and any position of t in the batch),
// because the order of every floating-point operation that produces it depends only on the type
// and `in`: lane l of the row's 16 lanes accumulates pieces l, l + 16, ... (weight_layout.hpp)
// with fused multiply-adds in a fixed order, and the 16 partial sums are combined with the same
// butterfly tree whatever n is (cuda/common/reduce.cuh, warp_sum_scatter).
// tests/cuda/reference.hpp (gemm_exact_order) reproduces this order on the CPU; the tests require
// bitwise equality with it for every type.

#include <cuda_runtime.h>

#include "kernels/types.hpp"

namespace specdec::cuda::kernels {

inline constexpr int kSkinnyMaxTokens = 16;

/// Whether skinny_gemm, embedding_gather and dequantize_rows handle weights of type t (every
/// DType the model layer computes with does).
bool has_weight_kernels(DType t) noexcept;

/// The weight rows each lane works on (skinny_gemm.cu) for a matrix of `out` rows when the
/// caller leaves the choice to the kernel: 4 from 8192 rows, 2 from 4096, else 1 (measured on an
/// H200: more rows per lane share each token's inputs and keep more loads in flight, but short
/// matrices then leave the GPU short of warps).
int skinny_rows_per_lane(int out) noexcept;

/// The rows_per_lane values skinny_gemm takes: 0 (automatic), 1, 2 or 4. The Transformer checks
/// its option with it at construction, the launcher every call.
constexpr bool valid_rows_per_lane(int r) noexcept { return r == 0 || r == 1 || r == 2 || r == 4; }

/// y[t][r] = sum_k W[r][k] x[t][k] for 1 <= n <= 16 (device pointers; y row t at y + t * ldy,
/// ldy = 0 meaning out). `warps` (1 to 32) per block, 2 * rows_per_lane rows per warp; 4 warps
/// is the GPU default, the emulated tests also run 1 and 2. rows_per_lane: 1, 2 or 4, or 0 for
/// skinny_rows_per_lane(out); every choice gives the same bits (Q2_K, Q3_K, Q6_K and IQ4_XS
/// take at most 2: more would spill registers).
/// Quantised types need `in` to be a multiple of the block size, W aligned as its blocks are in
/// a GGUF file mapped at a page boundary (2 to 16 bytes: weight_layout.hpp; cudaMalloc gives
/// 256) and x 16-byte aligned. F32 / F16 / BF16 rows take 16-byte loads when `in` % 8 == 0 and
/// W and x are 16-byte aligned, and are read element by element otherwise.
/// Throws specdec::Error naming the problem on invalid arguments; host-callable for any type,
/// so that a benchmark harness can run it on every weight type.
void skinny_gemm(DType type, const void* w, const float* x, float* y, int n, int out, int in,
                 cudaStream_t stream, int warps = 4, int ldy = 0, int rows_per_lane = 0);

}  // namespace specdec::cuda::kernels
