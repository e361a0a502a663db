#pragma once
// Dequantisation of every weight type specdec computes with, and quantisation of the types its
// writer produces. These are the host references: the GGUF reader's consumers, `convert`, the
// CUDA backend's upload of per-channel vectors, and the kernel tests, which check every kernel
// against them. Block layouts: specdec/model/quant_blocks.hpp.
//
// Bit-exactness: the dequantisers perform the same float operations in the same order as ggml's
// dequantize_row_* and the gguf Python package's quants module (tests/model/test_quants.cpp
// compares every type bit for bit with fixtures made by tools/make_quant_fixtures.py). The
// quantisers reproduce ggml's quantize_row_*_ref byte for byte: the 32-blocks as gguf.quants does
// too, the K-quants as llama.cpp's ggml_quantize_chunk (tools/make_kquant_fixtures.py).

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/model/dtype.hpp"

namespace specdec::quant {

// ------------------------------------------------------------------------ dequantisation
// out[0, count) from count / block_elems blocks; count must be a multiple of the block size.

void dequantize_row_f32(const std::byte* in, float* out, std::size_t count);
void dequantize_row_f16(const std::byte* in, float* out, std::size_t count);
void dequantize_row_bf16(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q4_0(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q4_1(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q5_0(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q5_1(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q8_0(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q2_k(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q3_k(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q4_k(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q5_k(const std::byte* in, float* out, std::size_t count);
void dequantize_row_q6_k(const std::byte* in, float* out, std::size_t count);
void dequantize_row_iq4_nl(const std::byte* in, float* out, std::size_t count);
void dequantize_row_iq4_xs(const std::byte* in, float* out, std::size_t count);

// ------------------------------------------------------------------------ quantisation

/// One Q8_0 block: q[j] = roundf(x[j] / d) (halves away from zero; NaN gives 0) with
/// d = max|x| / 127 over the 32 values (NaNs left out), computed with the unrounded float d as
/// ggml's quantize_row_q8_0_ref does. Returns d as binary16 bits (the scale a block stores).
/// The writer and the CPU backend's activation packing both use it.
std::uint16_t quantize_block_q8_0(const float* x, std::int8_t* q) noexcept;

/// Whether quantize() can write `t`.
bool can_quantize(DType t) noexcept;

/// Writes x (a multiple of the type's block size) as blocks of type `t` into `out` (exactly
/// x.size() / block_elems * block_bytes bytes). Throws specdec::Error naming the problem on a
/// size mismatch or a type it cannot write (see can_quantize).
///   F32, F16, BF16  element conversion (round to nearest even)
///   Q8_0            d = max|x| / 127, q = roundf(x / d) (halves away from zero)
///   Q4_0, Q5_0      d = (the value of largest magnitude) / -8 (-16), q = trunc(x / d + 8.5 (16.5))
///                   clamped to 15 (31)
///   Q4_1, Q5_1      d = (max - min) / 15 (31), m = min, q = trunc((x - min) / d + 0.5) clamped
///   (the scales are stored as binary16 but the quants are computed with the unrounded float
///   scale, as in ggml)
///   Q2_K ... Q6_K   per sub-block least-squares fits (make_qkx2_quants, make_q3_quants,
///                   make_qx_quants), sub-block scales quantised under a binary16 super-scale,
///                   quants re-derived from the stored scales (quants.cpp explains each)
/// All follow ggml's quantize_row_*_ref, i.e. llama-quantize without an importance matrix.
void quantize(DType t, std::span<const float> x, std::span<std::byte> out);

}  // namespace specdec::quant
