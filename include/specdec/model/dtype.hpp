#pragma once
// The weight types: one table (src/model/dtype.cpp) of every ggml tensor type a GGUF file can
// name, with the block geometry and, for the types specdec computes with, the DType and the
// function that dequantises them. The GGUF reader and writer, `convert`, `info` and both backends
// read it; adding a type is one row there plus its dequantiser (src/model/quants.cpp) and its
// kernels.
//
// Quantised types store a row of weights as blocks: `block_elems` weights in `block_bytes`
// bytes (ggml-common.h has the layouts; specdec/model/quant_block_layouts.hpp states them).
// A tensor's rows (its innermost dimension) hold whole blocks.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "specdec/model/dtype_enum.hpp"

namespace specdec {

/// Element type of a KV cache, on both backends. f16 halves its memory and its read traffic at
/// long contexts.
enum class KvType : std::uint8_t { f32, f16 };
constexpr std::size_t kv_type_bytes(KvType t) noexcept { return t == KvType::f16 ? 2 : 4; }

/// Turns `count` weights (a multiple of block_elems) stored as blocks into floats, exactly as
/// ggml's dequantize_row_* and the gguf Python package's quants module do (tests/model checks
/// every type bit for bit against the latter).
using DequantizeFn = void (*)(const std::byte* blocks, float* out, std::size_t count);

/// One row of the table: a ggml tensor type.
struct GgmlType {
  std::uint32_t id;           ///< ggml_type id, as GGUF files store it
  const char* name;           ///< ggml's name: "F32", "Q4_K", ...
  std::uint32_t block_elems;  ///< weights per block (1 for the float types)
  std::uint32_t block_bytes;  ///< bytes per block
  /// Set for the types specdec computes with, empty for those it only recognises (so that
  /// `specdec info` can show them and loading can name them in its error).
  std::optional<DType> dtype;
  /// Byte offsets in a block of its float16 scales (d; and m or dmin where the type has one), -1
  /// for none (the float types, and the types specdec does not compute with). A non-finite
  /// scale turns its whole block into NaN or Inf weights: loading refuses it.
  std::array<std::int16_t, 2> half_scales;
  DequantizeFn dequantize;  ///< null when dtype is empty
};

/// The row of a ggml type id; nullptr for ids ggml never assigned or has since removed.
const GgmlType* ggml_type(std::uint32_t id) noexcept;
/// The row of a DType (always present).
const GgmlType& dtype_info(DType t) noexcept;
/// Every DType, in enum order.
std::span<const DType> all_dtypes() noexcept;

/// Name of a ggml tensor type id ("F32", "Q4_K", ...), nullptr for an unknown id.
const char* ggml_type_name(std::uint32_t id) noexcept;
/// The DType of a ggml type id when specdec computes with it.
std::optional<DType> dtype_from_ggml(std::uint32_t id) noexcept;
/// The ggml type id of a DType.
std::uint32_t ggml_type_of(DType t) noexcept;
/// A DType from its name, any case ("q4_k", "Q4_K", "bf16"); nullopt for other names.
std::optional<DType> parse_dtype(std::string_view name) noexcept;
/// "F32, F16, BF16, Q4_0, ..." : the names of every DType, for error messages.
std::string_view supported_dtype_names() noexcept;

/// Elements per block (1 for the float types), bytes per block and ggml's name of a DType.
std::size_t dtype_block_elems(DType t) noexcept;
std::size_t dtype_block_bytes(DType t) noexcept;
const char* dtype_name(DType t) noexcept;
/// Whether a DType is F32, F16 or BF16.
bool is_float_dtype(DType t) noexcept;
/// Bytes of a row of `cols` weights; throws specdec::Error naming `what` when `cols` is not a
/// multiple of the type's block size.
std::size_t dtype_row_bytes(DType t, std::size_t cols, std::string_view what);

/// A block whose float16 scale is Inf or NaN (GgmlType::half_scales).
struct NonFiniteScale {
  std::size_t block;  ///< index of the block in the tensor's data
  const char* field;  ///< "d", "m" or "dmin"
  float value;        ///< the scale (inf, -inf or nan)
};
/// The first block of `data` (`nbytes`, whole blocks of type t) with a non-finite scale; nullopt
/// when there is none or t has no scales. One read of two bytes per block and scale.
std::optional<NonFiniteScale> find_non_finite_scale(DType t, const std::byte* data,
                                                    std::size_t nbytes) noexcept;

/// out[0, count) = the weights at `blocks` as floats; count is a multiple of the block size.
void dequantize(DType t, const std::byte* blocks, float* out, std::size_t count);

}  // namespace specdec
