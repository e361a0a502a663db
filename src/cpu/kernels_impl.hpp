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
#include "specdec/model/dtype_enum.hpp"
#include "specdec/model/quant_block_layouts.hpp"

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

/// Byte offsets inside a block, taken from the model layer's structs (quant_block_layouts.hpp,
/// which holds nothing that could be shared between instruction sets): short names for the SIMD
/// kernels' loads.
namespace block_layout {
using namespace specdec::quant;
inline constexpr std::size_t q8_0_bytes = sizeof(BlockQ8_0), q8_0_d = offsetof(BlockQ8_0, d),
                             q8_0_qs = offsetof(BlockQ8_0, qs);
inline constexpr std::size_t q4_0_bytes = sizeof(BlockQ4_0), q4_0_d = offsetof(BlockQ4_0, d),
                             q4_0_qs = offsetof(BlockQ4_0, qs);
inline constexpr std::size_t q4_1_bytes = sizeof(BlockQ4_1), q4_1_d = offsetof(BlockQ4_1, d),
                             q4_1_m = offsetof(BlockQ4_1, m), q4_1_qs = offsetof(BlockQ4_1, qs);
inline constexpr std::size_t q5_0_bytes = sizeof(BlockQ5_0), q5_0_d = offsetof(BlockQ5_0, d),
                             q5_0_qh = offsetof(BlockQ5_0, qh), q5_0_qs = offsetof(BlockQ5_0, qs);
inline constexpr std::size_t q5_1_bytes = sizeof(BlockQ5_1), q5_1_d = offsetof(BlockQ5_1, d),
                             q5_1_m = offsetof(BlockQ5_1, m), q5_1_qh = offsetof(BlockQ5_1, qh),
                             q5_1_qs = offsetof(BlockQ5_1, qs);
inline constexpr std::size_t iq4_nl_bytes = sizeof(BlockIQ4NL), iq4_nl_d = offsetof(BlockIQ4NL, d),
                             iq4_nl_qs = offsetof(BlockIQ4NL, qs);
inline constexpr std::size_t q2_k_bytes = sizeof(BlockQ2_K),
                             q2_k_scales = offsetof(BlockQ2_K, scales),
                             q2_k_qs = offsetof(BlockQ2_K, qs), q2_k_d = offsetof(BlockQ2_K, d),
                             q2_k_dmin = offsetof(BlockQ2_K, dmin);
inline constexpr std::size_t q3_k_bytes = sizeof(BlockQ3_K),
                             q3_k_hmask = offsetof(BlockQ3_K, hmask),
                             q3_k_qs = offsetof(BlockQ3_K, qs),
                             q3_k_scales = offsetof(BlockQ3_K, scales),
                             q3_k_d = offsetof(BlockQ3_K, d);
inline constexpr std::size_t q4_k_bytes = sizeof(BlockQ4_K), q4_k_d = offsetof(BlockQ4_K, d),
                             q4_k_dmin = offsetof(BlockQ4_K, dmin),
                             q4_k_scales = offsetof(BlockQ4_K, scales),
                             q4_k_qs = offsetof(BlockQ4_K, qs);
inline constexpr std::size_t q5_k_bytes = sizeof(BlockQ5_K), q5_k_d = offsetof(BlockQ5_K, d),
                             q5_k_dmin = offsetof(BlockQ5_K, dmin),
                             q5_k_scales = offsetof(BlockQ5_K, scales),
                             q5_k_qh = offsetof(BlockQ5_K, qh), q5_k_qs = offsetof(BlockQ5_K, qs);
inline constexpr std::size_t q6_k_bytes = sizeof(BlockQ6_K), q6_k_qh = offsetof(BlockQ6_K, qh),
                             q6_k_scales = offsetof(BlockQ6_K, scales),
                             q6_k_d = offsetof(BlockQ6_K, d);
inline constexpr std::size_t iq4_xs_bytes = sizeof(BlockIQ4XS), iq4_xs_d = offsetof(BlockIQ4XS, d),
                             iq4_xs_scales_h = offsetof(BlockIQ4XS, scales_h),
                             iq4_xs_scales_l = offsetof(BlockIQ4XS, scales_l),
                             iq4_xs_qs = offsetof(BlockIQ4XS, qs);
// The kernels read d and the 16-bit field after it (m, dmin, scales_h) as one dword: "head".
static_assert(q4_1_m == q4_1_d + 2 && q5_1_m == q5_1_d + 2 && q2_k_dmin == q2_k_d + 2 &&
              q4_k_dmin == q4_k_d + 2 && q5_k_dmin == q5_k_d + 2 &&
              iq4_xs_scales_h == iq4_xs_d + 2);
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
/// The field of a block from byte `from` to byte `to`.
constexpr BlockField field(std::size_t from, std::size_t to) {
  return {static_cast<unsigned char>(from), static_cast<unsigned char>(to - from)};
}
namespace bl = block_layout;
inline constexpr BlockField q8_0_fields[] = {field(0, bl::q8_0_qs),  // d
                                             field(bl::q8_0_qs, bl::q8_0_bytes)};
inline constexpr BlockField q4_0_fields[] = {field(0, bl::q4_0_qs),  // d
                                             field(bl::q4_0_qs, bl::q4_0_bytes)};
inline constexpr BlockField q4_1_fields[] = {field(0, bl::q4_1_qs),  // d | m
                                             field(bl::q4_1_qs, bl::q4_1_bytes)};
inline constexpr BlockField q5_0_fields[] = {field(0, bl::q5_0_qh),  // d
                                             field(bl::q5_0_qh, bl::q5_0_qs),
                                             field(bl::q5_0_qs, bl::q5_0_bytes)};
inline constexpr BlockField q5_1_fields[] = {field(0, bl::q5_1_qh),  // d | m
                                             field(bl::q5_1_qh, bl::q5_1_qs),
                                             field(bl::q5_1_qs, bl::q5_1_bytes)};
inline constexpr BlockField iq4_nl_fields[] = {field(0, bl::iq4_nl_qs),  // d
                                               field(bl::iq4_nl_qs, bl::iq4_nl_bytes)};
inline constexpr BlockField q2_k_fields[] = {field(bl::q2_k_scales, bl::q2_k_qs),
                                             field(bl::q2_k_qs, bl::q2_k_d),
                                             field(bl::q2_k_d, bl::q2_k_bytes)};  // d | dmin
inline constexpr BlockField q3_k_fields[] = {
    field(bl::q3_k_hmask, bl::q3_k_qs), field(bl::q3_k_qs, bl::q3_k_scales),
    field(bl::q3_k_scales, bl::q3_k_d), field(bl::q3_k_d, bl::q3_k_bytes)};
inline constexpr BlockField q4_k_fields[] = {field(0, bl::q4_k_qs),  // d | dmin and scales
                                             field(bl::q4_k_qs, bl::q4_k_bytes)};
inline constexpr BlockField q5_k_fields[] = {field(0, bl::q5_k_qh),  // d | dmin and scales
                                             field(bl::q5_k_qh, bl::q5_k_qs),
                                             field(bl::q5_k_qs, bl::q5_k_bytes)};
inline constexpr BlockField q6_k_fields[] = {
    field(0, bl::q6_k_qh), field(bl::q6_k_qh, bl::q6_k_scales),  // ql, qh
    field(bl::q6_k_scales, bl::q6_k_d), field(bl::q6_k_d, bl::q6_k_bytes)};
inline constexpr BlockField iq4_xs_fields[] = {field(0, bl::iq4_xs_scales_l),  // d | scales_h
                                               field(bl::iq4_xs_scales_l, bl::iq4_xs_qs),
                                               field(bl::iq4_xs_qs, bl::iq4_xs_bytes)};

/// The facts of each quantised type that every kernel shares, one row per DType (in the enum's
/// order; the float types' rows are empty: block_elems 0): weights and bytes per block, weights
/// per sub-block scale, the zero point z of the unsigned weights u (kernels.hpp's table; z = 128
/// for the types whose values are signed bytes, u = value + 128), whether the block has a min
/// factor m, and the block's fields in the rows16 layout. What only one instruction set needs (an
/// unpacking trick) stays in its file.
struct QuantTraits {
  DType type;  ///< the row's type: the table is checked to be in the enum's order
  std::size_t block_elems, block_bytes;
  int sub_elems, zero_point;
  bool has_min;
  BlockFields rows16;
};
inline constexpr BlockField no_fields[] = {{0, 0}};
inline constexpr QuantTraits quant_traits_table[] = {
    // type, weights per block, bytes per block, weights per sub-block, z, min, rows16 fields
    {DType::f32, 0, 0, 0, 0, false, no_fields},
    {DType::f16, 0, 0, 0, 0, false, no_fields},
    {DType::bf16, 0, 0, 0, 0, false, no_fields},
    {DType::q4_0, quant::kQK, bl::q4_0_bytes, 32, 8, false, q4_0_fields},
    {DType::q4_1, quant::kQK, bl::q4_1_bytes, 32, 0, true, q4_1_fields},
    {DType::q5_0, quant::kQK, bl::q5_0_bytes, 32, 16, false, q5_0_fields},
    {DType::q5_1, quant::kQK, bl::q5_1_bytes, 32, 0, true, q5_1_fields},
    {DType::q8_0, quant::kQK, bl::q8_0_bytes, 32, 128, false, q8_0_fields},
    {DType::q2_k, quant::kQK_K, bl::q2_k_bytes, 16, 0, true, q2_k_fields},
    {DType::q3_k, quant::kQK_K, bl::q3_k_bytes, 16, 4, false, q3_k_fields},
    {DType::q4_k, quant::kQK_K, bl::q4_k_bytes, 32, 0, true, q4_k_fields},
    {DType::q5_k, quant::kQK_K, bl::q5_k_bytes, 32, 0, true, q5_k_fields},
    {DType::q6_k, quant::kQK_K, bl::q6_k_bytes, 16, 32, false, q6_k_fields},
    {DType::iq4_nl, quant::kQK, bl::iq4_nl_bytes, 32, 128, false, iq4_nl_fields},
    {DType::iq4_xs, quant::kQK_K, bl::iq4_xs_bytes, 32, 128, false, iq4_xs_fields},
};
constexpr bool quant_traits_in_enum_order() {
  for (std::size_t i = 0; i < kDTypeCount; ++i)
    if (quant_traits_table[i].type != static_cast<DType>(i)) return false;
  return true;
}
static_assert(sizeof(quant_traits_table) / sizeof(quant_traits_table[0]) == kDTypeCount &&
              quant_traits_in_enum_order());
constexpr const QuantTraits& quant_traits(DType q) {
  return quant_traits_table[static_cast<int>(q)];
}
/// Whether the integer kernels compute with `q` (a row of the table above).
constexpr bool is_quant_type(DType q) { return quant_traits(q).block_elems != 0; }

/// For the blocks of 32 with a zero point (a power of two): the right shift that turns the
/// packed activation offset (-128 * the block's quant sum) into -z * sum.
constexpr int zero_point_shift(DType q) { return 7 - __builtin_ctz(quant_traits(q).zero_point); }

// Internal linkage: every kernel file compiles its own copy with its own -m flags, so that the
// linker cannot hand one ISA's copy to another's callers.
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces)

/// f.template operator()<Q>() for Q = t: an instruction set's dispatch from the run-time type to
/// its kernel templates, over the quantised rows of quant_traits_table.
template <class F>
void with_quant_type(DType t, F&& f) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      __builtin_trap();  // not quantised: kernels.cpp calls only with is_quant_type types
    case DType::q4_0:
      return f.template operator()<DType::q4_0>();
    case DType::q4_1:
      return f.template operator()<DType::q4_1>();
    case DType::q5_0:
      return f.template operator()<DType::q5_0>();
    case DType::q5_1:
      return f.template operator()<DType::q5_1>();
    case DType::q8_0:
      return f.template operator()<DType::q8_0>();
    case DType::q2_k:
      return f.template operator()<DType::q2_k>();
    case DType::q3_k:
      return f.template operator()<DType::q3_k>();
    case DType::q4_k:
      return f.template operator()<DType::q4_k>();
    case DType::q5_k:
      return f.template operator()<DType::q5_k>();
    case DType::q6_k:
      return f.template operator()<DType::q6_k>();
    case DType::iq4_nl:
      return f.template operator()<DType::iq4_nl>();
    case DType::iq4_xs:
      return f.template operator()<DType::iq4_xs>();
  }
}

/// Whether Q's blocks are super-blocks of 256 (the K-quants, IQ4_XS) rather than blocks of 32.
constexpr bool super_blocks(DType q) { return quant_traits(q).block_elems == quant::kQK_K; }

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
struct Iq4ValuesU8 {
  unsigned char v[16];
};
constexpr Iq4ValuesU8 make_iq4_values_u8() {
  Iq4ValuesU8 t{};
  for (int i = 0; i < 16; ++i) t.v[i] = static_cast<unsigned char>(quant::kIq4NlValues[i] + 128);
  return t;
}
inline constexpr Iq4ValuesU8 iq4_u8 = make_iq4_values_u8();
inline constexpr const unsigned char* iq4_values_u8 = iq4_u8.v;

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
  DType type;  ///< a quantised type (is_quant_type)
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
  /// The rows16 layout (above; the VNNI kernels only): w points at the group holding the range's
  /// first row, which is lane first_lane of it; y still points at the range's first row.
  bool rows16 = false;
  std::size_t first_lane = 0;
};
void quant_matmul_portable(const QuantArgs& a);
void quant_matmul_avx2(const QuantArgs& a);
/// AVX512-VNNI (kernels_quant_avx512vnni.cpp): needs cpu_features().avx512_vnni.
void quant_matmul_avx512vnni(const QuantArgs& a);
/// AVX-VNNI over the rows16 layout only (kernels_quant_avxvnni.cpp): needs cpu_features().avx_vnni.
void quant_matmul_avxvnni(const QuantArgs& a);
/// AVX2 without VNNI over the rows16 layout only (kernels_quant_avx2_rows16.cpp).
void quant_matmul_avx2_rows16(const QuantArgs& a);
/// AVX-512 without VNNI over the rows16 layout only (kernels_quant_avx512_rows16.cpp).
void quant_matmul_avx512_rows16(const QuantArgs& a);

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

/// Attention (kernels.hpp: attend): portable of one query head (a.heads is not read), the vector
/// kernels of a.heads <= kMaxAttentionHeads heads at once (their totals live on the stack).
inline constexpr std::size_t kMaxAttentionHeads = 64;
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
