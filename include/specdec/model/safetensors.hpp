#pragma once
// safetensors reader (https://github.com/huggingface/safetensors). Layout of a file:
//
//   u64 N (little-endian) | N bytes of JSON header | tensor data
//   header: {"__metadata__": {"k": "v", ...},            optional, string values only
//            "<name>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
//
// Offsets are relative to the start of the data (8 + N). Shapes are already outermost first.
// Every tensor is checked: known dtype, end - begin == elements * element size (overflow-checked),
// inside the file, aligned to its element size, no two tensors overlapping.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/model/weights.hpp"

namespace specdec {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;            ///< as in the header: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;        ///< set for F32, F16, BF16 (what specdec computes with)
  std::vector<std::uint64_t> shape;  ///< outermost first
  std::uint64_t begin = 0, end = 0;  ///< data_offsets, relative to the data section
  const std::byte* data = nullptr;   ///< into the file's bytes
  [[nodiscard]] std::uint64_t nbytes() const noexcept { return end - begin; }
};

class SafetensorsFile {
 public:
  std::string name;  ///< the path (or a label for in-memory bytes), first word of every error
  std::uint64_t header_size = 0;
  std::map<std::string, std::string> metadata;  ///< __metadata__
  std::vector<SafetensorsTensor> tensors;       ///< sorted by data offset
  std::shared_ptr<const MappedFile> file;       ///< keeps `data` alive (null: caller's bytes)

  [[nodiscard]] const SafetensorsTensor* find(std::string_view tensor_name) const;
};

/// Maps the file and parses it. Throws specdec::Error "<file>: <problem>".
SafetensorsFile read_safetensors(const std::string& path);
/// Parses bytes the caller keeps alive; `name` labels errors (fuzzer, malformed-file tests).
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name);

}  // namespace specdec
