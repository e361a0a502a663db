// The table of ggml tensor types: see specdec/model/dtype.hpp.
#include "specdec/model/dtype.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "specdec/common.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quant_blocks.hpp"
#include "specdec/model/quants.hpp"

namespace specdec {

namespace {

using namespace quant;

// The float16 scales' byte offsets in a block (quant_blocks.hpp): the K-quants that keep them at
// the end of the block.
constexpr std::array<std::int16_t, 2> kNoScales = {-1, -1};
constexpr std::int16_t kQ2KD = offsetof(BlockQ2_K, d);
constexpr std::int16_t kQ3KD = offsetof(BlockQ3_K, d);
constexpr std::int16_t kQ6KD = offsetof(BlockQ6_K, d);
static_assert(offsetof(BlockQ2_K, dmin) == kQ2KD + 2 && offsetof(BlockQ4_K, dmin) == 2 &&
              offsetof(BlockQ5_K, dmin) == 2 && offsetof(BlockQ4_1, m) == 2 &&
              offsetof(BlockQ5_1, m) == 2 && offsetof(BlockIQ4XS, d) == 0);

// Every ggml_type id ggml has assigned (ggml.h; gguf-py's GGML_QUANT_SIZES), in id order. Ids 4
// and 5 (Q4_2, Q4_3) and 31-33, 36-38 belonged to removed types and are absent, like unknown ids.
constexpr GgmlType kTypes[] = {
    {0, "F32", 1, 4, DType::f32, kNoScales, dequantize_row_f32},
    {1, "F16", 1, 2, DType::f16, kNoScales, dequantize_row_f16},
    {2, "Q4_0", 32, 18, DType::q4_0, {0, -1}, dequantize_row_q4_0},
    {3, "Q4_1", 32, 20, DType::q4_1, {0, 2}, dequantize_row_q4_1},
    {6, "Q5_0", 32, 22, DType::q5_0, {0, -1}, dequantize_row_q5_0},
    {7, "Q5_1", 32, 24, DType::q5_1, {0, 2}, dequantize_row_q5_1},
    {8, "Q8_0", 32, 34, DType::q8_0, {0, -1}, dequantize_row_q8_0},
    {9, "Q8_1", 32, 36, {}, kNoScales, nullptr},
    {10, "Q2_K", 256, 84, DType::q2_k, {kQ2KD, kQ2KD + 2}, dequantize_row_q2_k},
    {11, "Q3_K", 256, 110, DType::q3_k, {kQ3KD, -1}, dequantize_row_q3_k},
    {12, "Q4_K", 256, 144, DType::q4_k, {0, 2}, dequantize_row_q4_k},
    {13, "Q5_K", 256, 176, DType::q5_k, {0, 2}, dequantize_row_q5_k},
    {14, "Q6_K", 256, 210, DType::q6_k, {kQ6KD, -1}, dequantize_row_q6_k},
    {15, "Q8_K", 256, 292, {}, kNoScales, nullptr},
    {16, "IQ2_XXS", 256, 66, {}, kNoScales, nullptr},
    {17, "IQ2_XS", 256, 74, {}, kNoScales, nullptr},
    {18, "IQ3_XXS", 256, 98, {}, kNoScales, nullptr},
    {19, "IQ1_S", 256, 50, {}, kNoScales, nullptr},
    {20, "IQ4_NL", 32, 18, DType::iq4_nl, {0, -1}, dequantize_row_iq4_nl},
    {21, "IQ3_S", 256, 110, {}, kNoScales, nullptr},
    {22, "IQ2_S", 256, 82, {}, kNoScales, nullptr},
    {23, "IQ4_XS", 256, 136, DType::iq4_xs, {0, -1}, dequantize_row_iq4_xs},
    {24, "I8", 1, 1, {}, kNoScales, nullptr},
    {25, "I16", 1, 2, {}, kNoScales, nullptr},
    {26, "I32", 1, 4, {}, kNoScales, nullptr},
    {27, "I64", 1, 8, {}, kNoScales, nullptr},
    {28, "F64", 1, 8, {}, kNoScales, nullptr},
    {29, "IQ1_M", 256, 56, {}, kNoScales, nullptr},
    {30, "BF16", 1, 2, DType::bf16, kNoScales, dequantize_row_bf16},
    {34, "TQ1_0", 256, 54, {}, kNoScales, nullptr},
    {35, "TQ2_0", 256, 66, {}, kNoScales, nullptr},
    {39, "MXFP4", 32, 17, {}, kNoScales, nullptr},
    {40, "NVFP4", 64, 36, {}, kNoScales, nullptr},
    {41, "Q1_0", 128, 18, {}, kNoScales, nullptr},
};

constexpr std::array<DType, kDTypeCount> kAllDTypes = {
    DType::f32,  DType::f16,  DType::bf16, DType::q4_0,   DType::q4_1,
    DType::q5_0, DType::q5_1, DType::q8_0, DType::q2_k,   DType::q3_k,
    DType::q4_k, DType::q5_k, DType::q6_k, DType::iq4_nl, DType::iq4_xs,
};

/// The table row of each DType, found once (the table is small and sorted by id).
constexpr std::array<const GgmlType*, kDTypeCount> rows_by_dtype() {
  std::array<const GgmlType*, kDTypeCount> rows{};
  for (const GgmlType& t : kTypes)
    if (t.dtype) rows[static_cast<std::size_t>(*t.dtype)] = &t;
  return rows;
}
constexpr std::array<const GgmlType*, kDTypeCount> kRowOf = rows_by_dtype();

// (Whether each row has a dequantiser is not part of the check: GCC does not treat the comparison
// of a function's address with nullptr as a constant expression under -fsanitize=address, which
// broke the asan build; tests/model checks every DType's dequantiser.)
constexpr bool every_dtype_has_a_row() {
  for (std::size_t i = 0; i < kDTypeCount; ++i)
    if (kRowOf[i] == nullptr || kAllDTypes[i] != static_cast<DType>(i)) return false;
  return true;
}
static_assert(every_dtype_has_a_row(), "every DType needs exactly one row");

std::string make_supported_names() {
  std::string names;
  for (DType t : kAllDTypes) names += fmt::format("{}{}", names.empty() ? "" : ", ", dtype_name(t));
  return names;
}

}  // namespace

const GgmlType* ggml_type(std::uint32_t id) noexcept {
  const auto* it = std::find_if(std::begin(kTypes), std::end(kTypes),
                                [&](const GgmlType& t) { return t.id == id; });
  return it == std::end(kTypes) ? nullptr : it;
}

const GgmlType& dtype_info(DType t) noexcept { return *kRowOf[static_cast<std::size_t>(t)]; }

std::span<const DType> all_dtypes() noexcept { return kAllDTypes; }

const char* ggml_type_name(std::uint32_t id) noexcept {
  const GgmlType* t = ggml_type(id);
  return t ? t->name : nullptr;
}

std::optional<DType> dtype_from_ggml(std::uint32_t id) noexcept {
  const GgmlType* t = ggml_type(id);
  return t ? t->dtype : std::nullopt;
}

std::uint32_t ggml_type_of(DType t) noexcept { return dtype_info(t).id; }

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (DType t : kAllDTypes) {
    const std::string_view n = dtype_name(t);
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        }))
      return t;
  }
  return std::nullopt;
}

std::string_view supported_dtype_names() noexcept {
  static const std::string names = make_supported_names();
  return names;
}

std::size_t dtype_block_elems(DType t) noexcept { return dtype_info(t).block_elems; }
std::size_t dtype_block_bytes(DType t) noexcept { return dtype_info(t).block_bytes; }
const char* dtype_name(DType t) noexcept { return dtype_info(t).name; }

bool is_float_dtype(DType t) noexcept {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

std::size_t dtype_row_bytes(DType t, std::size_t cols, std::string_view what) {
  const std::size_t elems = dtype_block_elems(t);
  if (cols % elems != 0)
    throw Error(fmt::format("{}: {} rows of {} weights do not hold whole blocks of {}", what,
                            dtype_name(t), cols, elems));
  return cols / elems * dtype_block_bytes(t);
}

void dequantize(DType t, const std::byte* blocks, float* out, std::size_t count) {
  dtype_info(t).dequantize(blocks, out, count);
}

std::optional<NonFiniteScale> find_non_finite_scale(DType t, const std::byte* data,
                                                    std::size_t nbytes) noexcept {
  const GgmlType& row = dtype_info(t);
  if (row.half_scales[0] < 0) return std::nullopt;
  const std::size_t blocks = nbytes / row.block_bytes;
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::byte* at = data + block * row.block_bytes;
    for (std::size_t field = 0; field < row.half_scales.size(); ++field) {
      if (row.half_scales[field] < 0) continue;
      std::uint16_t bits = 0;
      std::memcpy(&bits, at + row.half_scales[field], sizeof bits);
      if ((bits & 0x7C00u) != 0x7C00u) continue;  // exponent all ones: Inf or NaN
      const char* name = field == 0 ? "d" : row.block_elems == 256 ? "dmin" : "m";
      return NonFiniteScale{block, name, fp16_to_fp32(bits)};
    }
  }
  return std::nullopt;
}

}  // namespace specdec
