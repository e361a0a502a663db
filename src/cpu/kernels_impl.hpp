#pragma once
// Entry points of the per-instruction-set kernel files. kernels_avx2.cpp, kernels_avx512.cpp,
// kernels_avx512vnni.cpp and kernels_amx.cpp are compiled with their own -m flags (sources.cmake);
// they include nothing but this header, <immintrin.h> and (the AVX-512 ones)
// kernels_avx512_reduce.hpp, and use no standard-library templates, so that no inline function
// compiled for AVX-512 can be merged by the linker into code that runs on an older CPU. kernels.cpp
// checks the CPU before calling any of them.
//
// The reduction orders they implement are described in include/specdec/cpu/kernels.hpp; every
// function here computes exactly that order (the tests compare each with the portable one bit for
// bit).

#include <cstddef>
#include <cstdint>

#include "specdec/cephes_exp.hpp"
#include "specdec/cpu/kernel_args.hpp"

namespace specdec::cpu::detail {

/// Weight element types of the fma kernels (F32, F16, BF16 weights with f32 activations).
enum class FmaWeights : int { f32 = 0, f16 = 1, bf16 = 2 };

/// Bytes of one Q8_0 block: an f16 scale then 32 int8 quants.
inline constexpr std::size_t q8_block_bytes = 34;
inline constexpr std::size_t q8_block_elems = 32;

/// The fma paths: y[t * ldy + r] = dot(W[r], x[t]) for r in [0, rows), t in [0, n).
/// w points at row 0 of the range; x is f32 [n][cols] (row stride cols).
struct FmaArgs {
  FmaWeights type;
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const float* x;
  std::size_t n;
  float* y;
  std::size_t ldy;
};
void fma_matmul_portable(const FmaArgs& a);
void fma_matmul_avx2(const FmaArgs& a);
void fma_matmul_avx512(const FmaArgs& a);

/// The Q8_0 paths with row-major quantised activations: xq int8 [n][cols], xd f32 [n][cols/32],
/// x_offsets int32 [n][cols/32] = -128 * (sum of the block's 32 quants), the term that the VNNI
/// kernel's unsigned weights (w + 128) add to each block's dot product (the others ignore it).
struct Q8RowsArgs {
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const std::int8_t* xq;
  const float* xd;
  const std::int32_t* x_offsets;
  std::size_t n;
  float* y;
  std::size_t ldy;
};
void q8_matmul_portable(const Q8RowsArgs& a);
void q8_matmul_avx2(const Q8RowsArgs& a);
/// AVX512-VNNI (kernels_avx512vnni.cpp): needs cpu_features().avx512_vnni.
void q8_matmul_avx512vnni(const Q8RowsArgs& a);

// ---- every other quantised type: integer kernels ------------------------------------------------
//
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32, activations in the q8_0_rows layout) and Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (super-blocks of 256, activations in the q8_k_rows layout).
// Each kernel reads a block as unsigned 8-bit weights u, integer sub-block scales sc_j and mins
// mn_j, a zero point z and the block's binary16 factors d and m (kernels.hpp, "Reduction order",
// has the table), forms the exact integers
//   isum = sum_j sc_j * (sum_{k in j} u_k x_k - z * xsum_j),   msum = sum_j mn_j * xsum_j
// (xsum_j: the sum of the activation quants of sub-block j) and accumulates
//   acc = fma(float(isum), d * dx, acc);  acc = fma(float(msum), m * dx, acc)  (types with mins)
// over the blocks in order, dx being the activation block's scale. The integers are the same
// whatever order a kernel adds them in, so every instruction set gives the same bits.

/// The quantised weight types of these kernels (kernels.cpp maps DType to it).
enum class QuantType : int { q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs };

/// Byte offsets inside a block, for the SIMD kernels, which cannot include the model layer's
/// structs (specdec/model/quant_blocks.hpp); kernels_quant.cpp checks every one against them.
namespace block_layout {
inline constexpr std::size_t q4_0_bytes = 18, q4_0_qs = 2;
inline constexpr std::size_t q4_1_bytes = 20, q4_1_m = 2, q4_1_qs = 4;
inline constexpr std::size_t q5_0_bytes = 22, q5_0_qh = 2, q5_0_qs = 6;
inline constexpr std::size_t q5_1_bytes = 24, q5_1_m = 2, q5_1_qh = 4, q5_1_qs = 8;
inline constexpr std::size_t iq4_nl_bytes = 18, iq4_nl_qs = 2;
inline constexpr std::size_t q2_k_bytes = 84, q2_k_scales = 0, q2_k_qs = 16, q2_k_d = 80;
inline constexpr std::size_t q3_k_bytes = 110, q3_k_hmask = 0, q3_k_qs = 32, q3_k_scales = 96,
                             q3_k_d = 108;
inline constexpr std::size_t q4_k_bytes = 144, q4_k_scales = 4, q4_k_qs = 16;
inline constexpr std::size_t q5_k_bytes = 176, q5_k_scales = 4, q5_k_qh = 16, q5_k_qs = 48;
inline constexpr std::size_t q6_k_bytes = 210, q6_k_qh = 128, q6_k_scales = 192, q6_k_d = 208;
inline constexpr std::size_t iq4_xs_bytes = 136, iq4_xs_scales_h = 2, iq4_xs_scales_l = 4,
                             iq4_xs_qs = 8;
}  // namespace block_layout

/// Bytes of a block of the 32-blocks types (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
template <QuantType Q>
constexpr std::size_t block32_bytes() {
  using namespace block_layout;
  return Q == QuantType::q4_0   ? q4_0_bytes
         : Q == QuantType::q4_1 ? q4_1_bytes
         : Q == QuantType::q5_0 ? q5_0_bytes
         : Q == QuantType::q5_1 ? q5_1_bytes
                                : iq4_nl_bytes;
}

/// The repacked layout of these types for the AVX512-VNNI kernel (MatrixRef::layout
/// WeightLayout::rows16, written once at load by cpu::repack_weights): rows in groups of 16, a
/// group's 16 x row_bytes bytes in the same place as in the file, inside it block b of the 16
/// rows at 16 * b * block_bytes, holding each of the block's fields (below) at 16 x its offset:
///  - a field of 4k bytes as k registers of 64 bytes, register i = dword i of rows 0..15 (what
///    the kernel's transposes of the file's layout produce, stored in the order it uses them);
///  - a 2-byte field (a binary16 factor) as the 16 rows' values in order (32 bytes).
/// So a block of 16 rows is one contiguous stream, and the kernel's loads need no transposes or
/// gathers. The size is the file's (plus zero rows up to a multiple of 16).
struct BlockField {
  unsigned char offset, bytes;
};
struct BlockFields {
  template <int N>
  constexpr BlockFields(
      const BlockField (&table)[N]) noexcept  // NOLINT(google-explicit-constructor)
      : fields(table), count(N) {}
  const BlockField* fields;
  int count;
};
inline constexpr BlockField q4_0_fields[] = {{0, 2}, {2, 16}};             // d, qs
inline constexpr BlockField q4_1_fields[] = {{0, 4}, {4, 16}};             // d | m, qs
inline constexpr BlockField q5_0_fields[] = {{0, 2}, {2, 4}, {6, 16}};     // d, qh, qs
inline constexpr BlockField q5_1_fields[] = {{0, 4}, {4, 4}, {8, 16}};     // d | m, qh, qs
inline constexpr BlockField iq4_nl_fields[] = {{0, 2}, {2, 16}};           // d, qs
inline constexpr BlockField q2_k_fields[] = {{0, 16}, {16, 64}, {80, 4}};  // scales, qs, d | dmin
inline constexpr BlockField q3_k_fields[] = {{0, 32}, {32, 64}, {96, 12}, {108, 2}};
inline constexpr BlockField q4_k_fields[] = {{0, 16}, {16, 128}};  // d | dmin and scales, qs
inline constexpr BlockField q5_k_fields[] = {{0, 16}, {16, 32}, {48, 128}};
inline constexpr BlockField q6_k_fields[] = {{0, 128}, {128, 64}, {192, 16}, {208, 2}};
inline constexpr BlockField iq4_xs_fields[] = {{0, 4}, {4, 4}, {8, 128}};  // d | scales_h, ...
inline constexpr BlockFields rows16_fields(QuantType q) {
  switch (q) {
    case QuantType::q4_0:
      return q4_0_fields;
    case QuantType::q4_1:
      return q4_1_fields;
    case QuantType::q5_0:
      return q5_0_fields;
    case QuantType::q5_1:
      return q5_1_fields;
    case QuantType::iq4_nl:
      return iq4_nl_fields;
    case QuantType::q2_k:
      return q2_k_fields;
    case QuantType::q3_k:
      return q3_k_fields;
    case QuantType::q4_k:
      return q4_k_fields;
    case QuantType::q5_k:
      return q5_k_fields;
    case QuantType::q6_k:
      return q6_k_fields;
    case QuantType::iq4_xs:
      return iq4_xs_fields;
  }
  __builtin_unreachable();  // the switch names every QuantType
}

/// The 16 values of IQ4_NL / IQ4_XS plus 128: the unsigned weights u of those types.
inline constexpr unsigned char iq4_values_u8[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};

/// Activation sums per super-block of 256 in the q8_k_rows layout: 16 sums of 16 quants, then 8
/// sums of 32 (int16).
inline constexpr std::size_t q8_k_sums = 24;

/// y[t * ldy + r] = dot(W[r], x[t]) for r in [0, rows), t in [0, n); w points at row 0.
/// Blocks of 32: xq int8 [n][cols], xd f32 [n][cols/32], x_offsets int32 [n][cols/32]
/// (-128 * the block's quant sum, as for Q8_0), x_sums unused.
/// Blocks of 256: xq int8 [n][cols], xd f32 [n][cols/256], x_sums int16 [n][cols/256][24],
/// x_offsets unused.
struct QuantArgs {
  QuantType type;
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const std::int8_t* xq;
  const float* xd;
  const std::int32_t* x_offsets;
  const std::int16_t* x_sums;
  std::size_t n;
  float* y;
  std::size_t ldy;
  /// The rows16 layout (above; AVX512-VNNI only): w points at the group holding the range's
  /// first row, which is lane first_lane of it; y still points at the range's first row.
  bool rows16 = false;
  std::size_t first_lane = 0;
};
void quant_matmul_portable(const QuantArgs& a);
void quant_matmul_avx2(const QuantArgs& a);
/// AVX512-VNNI (kernels_quant_avx512vnni.cpp): needs cpu_features().avx512_vnni.
void quant_matmul_avx512vnni(const QuantArgs& a);

/// Blocks [b0, b1) of 256 of the q8_k_rows layout (int8 [n][cols], scales f32 [n][cols/256], sums
/// int16 [n][cols/256][24]): d = max|x| / 127 (not rounded), q = roundf(x / d) (halves away from
/// zero, NaN -> 0), as the portable packing in kernels.cpp.
void pack_q8_k_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t b0, std::size_t b1, std::int8_t* q8, float* scales,
                           std::int16_t* sums);

/// BF16 weights with bf16 activations xb uint16 [n][cols] (row stride cols), AVX512-BF16
/// (kernels_avx512vnni.cpp): needs cpu_features().avx512_bf16. y as for the fma paths.
struct Bf16RowsArgs {
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const std::uint16_t* xb;
  std::size_t n;
  float* y;
  std::size_t ldy;
};
void bf16_matmul_avx512bf16(const Bf16RowsArgs& a);

/// AMX paths. rows must be a multiple of 16 (the caller pads a tail into a copy).
/// BF16: xt = bf16 tiles [chunks][cols/32][16][16][2]; cols % 32 == 0.
struct AmxBf16Args {
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const std::uint16_t* xt;
  std::size_t n;
  float* y;
  std::size_t ldy;
};
void bf16_matmul_amx(const AmxBf16Args& a);
/// Q8_0: xt, xd, fix as pack_q8_0_pairs_avx512 writes them (chunks of 8 tokens).
struct AmxQ8Args {
  const std::byte* w;
  std::size_t row_bytes;
  std::size_t rows;
  std::size_t cols;
  const std::uint32_t* xt;
  const float* xd;
  const std::uint32_t* fix;
  std::size_t n;
  float* y;
  std::size_t ldy;
};
void q8_matmul_amx(const AmxQ8Args& a);
/// The AMX activation layouts (kernels.hpp: PackedInput) written with AVX-512 (same conversions
/// as the portable f32_to_bf16 and quantize_row_q8_0): pairs [p0, p1) of `pairs` (bf16), blocks
/// [b0, b1) of `blocks` (Q8_0), of tokens [0, n). BF16: chunks of 16 tokens, per 32 columns a tile
/// of 16 rows (k pairs) x m dwords (m = the chunk's token count); a chunk starts every 16 * pairs
/// dwords, its steps are 16m dwords apart.
void pack_bf16_tiles_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t pairs,
                            std::size_t p0, std::size_t p1, std::uint32_t* out);
/// Q8_0 for the AMX kernel, in chunks of 8 tokens: per pair of blocks (2p, 2p+1) one tile of 16
/// rows x 2m dwords, m the chunk's token count (a chunk starts every 256 * ceil(blocks / 2)
/// dwords, its slots are 32m dwords apart), two columns per token: column t = token t's block 2p
/// quants in rows 0-7 (bytes 0-31) and zeros below; column m + t = 34 zero bytes then block
/// 2p+1's quants 0-29 (the window a weight row's bytes 2..65 of the pair occupy). fix = quants 30
/// and 31 of block 2p+1 as two int16 (the two products outside the window). An odd last block's
/// column m + t is zero. Ranges [b0, b1) start at even blocks.
void pack_q8_0_pairs_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t blocks,
                            std::size_t b0, std::size_t b1, std::uint32_t* out, float* scales,
                            std::uint32_t* fix);
/// Blocks [b0, b1) of the q8_0_rows layout (int8 [n][cols], scales and offsets [n][cols/32]) with
/// AVX-512, the same values as the portable packing.
void pack_q8_0_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t b0, std::size_t b1, std::int8_t* q8, float* scales,
                           std::int32_t* offsets);
/// Columns [c0, c1) of the bf16_rows layout (uint16 [n][cols], f32_to_bf16 of each value) with
/// AVX-512; c0 is a multiple of 16.
void pack_bf16_rows_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t cols,
                           std::size_t c0, std::size_t c1, std::uint16_t* out);
/// Requests AMX tile data permission for the process (Linux arch_prctl); true when granted.
bool amx_request_permission();

/// Attention of one query head (kernels.hpp: attend).
void attend_portable(const AttentionArgs& a);
void attend_avx2(const AttentionArgs& a);
void attend_avx512(const AttentionArgs& a);

/// out[i] = silu(gate[i]) * up[i] with the backend's exp.
void swiglu_portable(const float* gate, const float* up, float* out, std::size_t count);
void swiglu_avx2(const float* gate, const float* up, float* out, std::size_t count);
void swiglu_avx512(const float* gate, const float* up, float* out, std::size_t count);

/// sum of squares in the canonical 16-lane order (for RMSNorm).
float sum_squares_portable(const float* x, std::size_t count);
float sum_squares_avx2(const float* x, std::size_t count);
float sum_squares_avx512(const float* x, std::size_t count);

/// f32 <-> f16 conversion of a row (KV cache), round to nearest even.
void f32_to_f16_row_portable(const float* in, std::uint16_t* out, std::size_t count);
void f32_to_f16_row_avx2(const float* in, std::uint16_t* out, std::size_t count);

// ---- exp: Cephes' expf, its constants in specdec/cephes_exp.hpp (shared with the sampling core)
// exp(x) = 2^n * p(r), n = round(x / ln2), r = x - n * ln2 (in two steps), p a degree-7 polynomial.
// Inputs above exp_max_x are clamped to it (the result saturates at exp(88) ~ 1.65e38, never inf);
// below exp_min_x the result is 0 (the true value is below 1.7e-38).
inline constexpr float exp_log2e = cephes_exp::log2e;
inline constexpr float exp_ln2_hi = cephes_exp::ln2_hi;
inline constexpr float exp_ln2_lo = cephes_exp::ln2_lo;
inline constexpr float exp_round_magic = cephes_exp::round_magic;
inline constexpr float exp_p0 = cephes_exp::p0;
inline constexpr float exp_p1 = cephes_exp::p1;
inline constexpr float exp_p2 = cephes_exp::p2;
inline constexpr float exp_p3 = cephes_exp::p3;
inline constexpr float exp_p4 = cephes_exp::p4;
inline constexpr float exp_p5 = cephes_exp::p5;
inline constexpr float exp_max_x = 88.0f;   // n <= 127 and 2^n * p(r) stays finite
inline constexpr float exp_min_x = -87.0f;  // n >= -126 with r > 0: 2^n * p(r) stays normal

}  // namespace specdec::cpu::detail
