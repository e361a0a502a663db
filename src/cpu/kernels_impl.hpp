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

// ---- the quantised types: integer kernels -------------------------------------------------------
//
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32, activations in the q8_0_rows layout) and
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (super-blocks of 256, activations in the q8_k_rows layout).
// Each kernel reads a block as unsigned 8-bit weights u, integer sub-block scales sc_j and mins
// mn_j, a zero point z and the block's binary16 factors d and m (kernels.hpp, "Reduction order",
// has the table), forms the exact integers
//   isum = sum_j sc_j * (sum_{k in j} u_k x_k - z * xsum_j),   msum = sum_j mn_j * xsum_j
// (xsum_j: the sum of the activation quants of sub-block j) and accumulates
//   acc = fma(float(isum), d * dx, acc);  acc = fma(float(msum), m * dx, acc)  (types with mins)
// over the blocks in order, dx being the activation block's scale. The integers are the same
// whatever order a kernel adds them in, so every instruction set gives the same bits.

/// The quantised weight types of these kernels (kernels.cpp maps DType to it).
enum class QuantType : int {
  q8_0,
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  iq4_nl,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  iq4_xs
};

/// Byte offsets inside a block, for the SIMD kernels, which cannot include the model layer's
/// structs (specdec/model/quant_blocks.hpp); kernels_quant.cpp checks every one against them.
namespace block_layout {
inline constexpr std::size_t q8_0_bytes = 34, q8_0_qs = 2;
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

/// The repacked layout of these types for the AVX512-VNNI kernel (MatrixRef::layout
/// WeightLayout::rows16, written once at load by cpu::repack_weights): rows in groups of 16, a
/// group's 16 x row_bytes bytes in the same place as in the file, inside it block b of the 16
/// rows at 16 * b * block_bytes, holding each of the block's fields (QuantTraits::rows16) at 16 x
/// its offset:
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
inline constexpr BlockField q8_0_fields[] = {{0, 2}, {2, 32}};             // d, qs
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

/// The facts of each quantised type that every kernel shares, one row per QuantType (in the
/// enum's order; kernels_quant.cpp checks the sizes against the model layer's block structs):
/// weights and bytes per block, weights per sub-block scale, the zero point z of the unsigned
/// weights u (kernels.hpp's table; z = 128 for the types whose values are signed bytes, u =
/// value + 128), whether the block has a min factor m, and the block's fields in the rows16
/// layout. What only one instruction set needs (an unpacking trick) stays in its file.
struct QuantTraits {
  std::size_t block_elems, block_bytes;
  int sub_elems, zero_point;
  bool has_min;
  BlockFields rows16;
};
inline constexpr QuantTraits quant_traits_table[] = {
    // weights per block, bytes per block, weights per sub-block, z, min, rows16 fields
    {32, block_layout::q8_0_bytes, 32, 128, false, q8_0_fields},       // q8_0
    {32, block_layout::q4_0_bytes, 32, 8, false, q4_0_fields},         // q4_0
    {32, block_layout::q4_1_bytes, 32, 0, true, q4_1_fields},          // q4_1
    {32, block_layout::q5_0_bytes, 32, 16, false, q5_0_fields},        // q5_0
    {32, block_layout::q5_1_bytes, 32, 0, true, q5_1_fields},          // q5_1
    {32, block_layout::iq4_nl_bytes, 32, 128, false, iq4_nl_fields},   // iq4_nl
    {256, block_layout::q2_k_bytes, 16, 0, true, q2_k_fields},         // q2_k
    {256, block_layout::q3_k_bytes, 16, 4, false, q3_k_fields},        // q3_k
    {256, block_layout::q4_k_bytes, 32, 0, true, q4_k_fields},         // q4_k
    {256, block_layout::q5_k_bytes, 32, 0, true, q5_k_fields},         // q5_k
    {256, block_layout::q6_k_bytes, 16, 32, false, q6_k_fields},       // q6_k
    {256, block_layout::iq4_xs_bytes, 32, 128, false, iq4_xs_fields},  // iq4_xs
};
static_assert(sizeof(quant_traits_table) / sizeof(quant_traits_table[0]) ==
              static_cast<std::size_t>(QuantType::iq4_xs) + 1);
constexpr const QuantTraits& quant_traits(QuantType q) {
  return quant_traits_table[static_cast<int>(q)];
}

/// For the blocks of 32 with a zero point (a power of two): the right shift that turns the
/// packed activation offset (-128 * the block's quant sum) into -z * sum.
constexpr int zero_point_shift(QuantType q) {
  return 7 - __builtin_ctz(quant_traits(q).zero_point);
}

// Internal linkage: every kernel file compiles its own copy with its own -m flags, so that the
// linker cannot hand one ISA's copy to another's callers.
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces)

/// Prefetch for streaming `Rows` interleaved rows (the integer kernels' groups of 8 or 16 rows,
/// file layout): while block b of the group is computed, the lines `ahead` bytes further along
/// each row (past the row's end: the same row of the next group) are requested into L2. The
/// interleaved rows defeat the hardware prefetchers: measured on the project's Xeon with
/// specdec_bench_cpu_kernels BM_matmul_stream, one thread, AVX512-VNNI, Q4_0 / Q4_K / Q6_K n = 1
/// took 104 / 98 / 119 ms without, 68 / 70 / 78 with 512 bytes ahead (about the same from 256 to
/// 1536), and 20% less at n = 8; prefetching the next group of rows instead gained nothing.
template <int Rows>
struct RowPrefetcher {
  static constexpr std::size_t ahead = 512;
  /// prefetcht2, written as an assembly statement: GCC 12 deletes a loop whose body only holds
  /// __builtin_prefetch (_mm_prefetch) calls, as this one's does.
  static void prefetch_l2(const std::byte* p) {
    __asm__ volatile("prefetcht2 %0" : : "m"(*reinterpret_cast<const char*>(p)));
  }

  const std::byte* group;  ///< row 0 of the current group
  std::size_t row_bytes, bytes;
  bool next_group;  ///< whether the next group of Rows rows exists
  void operator()(std::size_t b) const {
    // The lines of byte range [lo, lo + bytes) along a row, less the one block b - 1 requested.
    const std::size_t lo = b * bytes + ahead, last = (lo + bytes - 1) / 64;
    std::size_t first = lo / 64;
    if (b != 0 && (lo - 1) / 64 == first) ++first;
    for (std::size_t l = first; l <= last; ++l) {
      std::size_t off = 64 * l;
      const std::byte* base = group;
      if (off >= row_bytes) {
        if (!next_group) return;
        off -= row_bytes;
        base = group + Rows * row_bytes;
      }
      for (int r = 0; r < Rows; ++r) prefetch_l2(base + r * row_bytes + off);
    }
  }
};

}  // namespace

/// The 16 values of IQ4_NL / IQ4_XS plus 128: the unsigned weights u of those types.
inline constexpr unsigned char iq4_values_u8[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                    129, 141, 153, 166, 181, 197, 217, 241};

/// Activation sums per super-block of 256 in the q8_k_rows layout: 16 sums of 16 quants, then 8
/// sums of 32 (int16).
inline constexpr std::size_t q8_k_sums = 24;

/// y[t * ldy + r] = dot(W[r], x[t]) for r in [0, rows), t in [0, n); w points at row 0.
/// Blocks of 32: xq int8 [n][cols], xd f32 [n][cols/32], x_offsets int32 [n][cols/32]
/// (-128 * the block's quant sum: the zero-point term of unsigned weights u = w + 128, which the
/// VNNI kernels start each block's sum from), x_sums unused.
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
/// The AMX activation layout bf16_tiles (kernels.hpp: PackedInput) written with AVX-512 (same
/// conversions as the portable f32_to_bf16): pairs [p0, p1) of `pairs`, of tokens [0, n), in chunks
/// of 16 tokens, per 32 columns a tile of 16 rows (k pairs) x m dwords (m = the chunk's token
/// count); a chunk starts every 16 * pairs dwords, its steps are 16m dwords apart.
void pack_bf16_tiles_avx512(const float* x, std::size_t n, std::size_t ldx, std::size_t pairs,
                            std::size_t p0, std::size_t p1, std::uint32_t* out);
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
