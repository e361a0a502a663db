#pragma once
// GGUF reader (versions 2 and 3, little-endian), as written by llama.cpp and the gguf Python
// package. Layout of a file:
//
//   "GGUF" | u32 version | u64 tensor_count | u64 metadata_count
//   metadata_count x (string key | u32 value type | value)        strings: u64 length + bytes
//   tensor_count   x (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset)
//   padding to general.alignment (default 32)
//   tensor data; each tensor at data start + offset, offsets multiples of the alignment
//
// ne[] lists dimensions innermost first; GgufTensorInfo::shape is reversed to PyTorch order
// (outermost first), like everything in specdec. Every count, length and offset is checked
// against the bytes actually present before it is used.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "specdec/model/loader.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/model/weights.hpp"

namespace specdec {

/// GGUF metadata value types (gguf_type in ggml).
enum class GgufType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};
const char* gguf_type_name(GgufType t) noexcept;  ///< "u32", "string", "array", ...

/// One metadata value. Integers are widened to 64 bits (unsigned types to uint64, signed to int64),
/// floats to double; `type` keeps the type the file declared. Arrays may nest.
struct GgufValue {
  using Array = std::vector<GgufValue>;
  GgufType type = GgufType::uint8;
  GgufType element_type = GgufType::uint8;  ///< arrays only: the declared type of the elements
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, Array> value;

  /// Conversions that succeed only when the value is representable: as_uint() of a negative
  /// int32 is nullopt, as_float() accepts the float and integer types.
  [[nodiscard]] std::optional<std::uint64_t> as_uint() const;
  [[nodiscard]] std::optional<std::int64_t> as_int() const;
  [[nodiscard]] std::optional<double> as_float() const;
  [[nodiscard]] std::optional<bool> as_bool() const;
  [[nodiscard]] const std::string* as_string() const;  ///< nullptr unless a string
  [[nodiscard]] const Array* as_array() const;         ///< nullptr unless an array

  /// For display: scalars in full, strings quoted, arrays as "[type x N] first elements ...".
  [[nodiscard]] std::string to_string(std::size_t max_array_elems = 6) const;
};

/// A tensor as the file describes it. `dtype` is set when specdec supports the ggml type; other
/// known ggml types (IQ2_XS, TQ1_0, ...) still parse so that `specdec info` can show them.
struct GgufTensorInfo {
  std::string name;
  std::uint32_t ggml_type = 0;       ///< raw ggml_type id
  std::optional<DType> dtype;        ///< nullopt: a ggml type specdec cannot compute with
  std::vector<std::uint64_t> shape;  ///< outermost first (the file's ne[] reversed)
  std::uint64_t offset = 0;          ///< from the start of the data section
  std::uint64_t nbytes = 0;
  const std::byte* data = nullptr;  ///< into the file's bytes (checked to lie inside them)
};

class GgufFile {
 public:
  std::string name;  ///< the path (or a label for in-memory bytes), first word of every error
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;   ///< general.alignment
  std::uint64_t data_offset = 0;  ///< where the tensor data section starts in the file
  std::uint64_t file_size = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;  ///< in file order, keys unique
  std::vector<GgufTensorInfo> tensors;                      ///< in file order, names unique
  std::shared_ptr<const MappedFile> file;  ///< keeps `data` pointers alive (null: caller's bytes)

  [[nodiscard]] const GgufValue* find(std::string_view key) const;
  [[nodiscard]] const GgufTensorInfo* find_tensor(std::string_view tensor_name) const;

  /// Typed metadata access: nullopt when the key is absent; throws specdec::Error
  /// "<file>: metadata key '<key>' is <type>, expected <...>" when present with the wrong type.
  [[nodiscard]] std::optional<std::uint64_t> get_uint(std::string_view key) const;
  [[nodiscard]] std::optional<double> get_float(std::string_view key) const;
  [[nodiscard]] std::optional<bool> get_bool(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> get_string(std::string_view key) const;
  /// An array whose elements have type `element` (nullptr when absent).
  [[nodiscard]] const GgufValue::Array* get_array(std::string_view key, GgufType element) const;

  /// Throws specdec::Error "<file>: <problem>".
  [[noreturn]] void fail(const std::string& problem) const;
};

/// Maps the file and parses it (metadata and tensor infos are copied; tensor data is not).
GgufFile read_gguf(const std::string& path);
/// Parses GGUF bytes owned by the caller, who keeps them alive while the result is used.
/// `name` labels errors. This is what the fuzzer and the malformed-file tests call.
GgufFile parse_gguf(std::span<const std::byte> bytes, const std::string& name);

/// ModelConfig from the metadata ({arch}.* keys) and, where the metadata is silent, from the
/// tensor shapes (vocab from token_embd, tied embeddings when output.weight is absent).
/// Supported architectures: llama, mistral, qwen2, qwen3.
ModelConfig gguf_model_config(const GgufFile& gguf);
/// The tokenizer spec from the tokenizer.ggml.* keys; nullopt when the file carries none.
std::optional<TokenizerSpec> gguf_tokenizer_spec(const GgufFile& gguf);
/// Config + weights (pointing into the file, not copied) + tokenizer, all validated.
LoadedModel load_gguf_model(const GgufFile& gguf);

/// Every metadata key and value (long arrays abbreviated), one per line; for `specdec info`.
std::string describe_gguf_metadata(const GgufFile& gguf);

}  // namespace specdec
