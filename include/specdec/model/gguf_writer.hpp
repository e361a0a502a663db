#pragma once
// Writing GGUF v3 files, and converting a model's weights to a compact type (F16 or Q8_0).
//
// This is what makes the bundled demo models: `specdec convert IN.gguf OUT.gguf --type q8_0`
// rewrites the trained F32 pair with every weight matrix in Q8_0 and the norms kept in F32, as
// llama.cpp's llama-quantize does. The conversions reproduce ggml's reference code bit for bit:
//   F16   IEEE binary16, round to nearest even (ggml's GGML_FP32_TO_FP16, numpy's astype);
//   Q8_0  blocks of 32 weights stored as { f16 d; int8 qs[32]; } (34 bytes), d = max|x| / 127,
//         qs = roundf(x / d) (halves away from zero), as ggml's quantize_row_q8_0_ref and the
//         gguf Python package's quants.Q8_0 (tests/cli checks both against the latter).
//
// The layout written (the reader in gguf.hpp describes the same):
//   "GGUF" | u32 3 | u64 tensor_count | u64 metadata_count | metadata | tensor infos
//   | padding to the alignment | tensor data, each tensor at a multiple of the alignment.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/weights.hpp"

namespace specdec {

static_assert(std::endian::native == std::endian::little,
              "the GGUF writer writes the host's byte order, and GGUF files are little-endian");

// ------------------------------------------------------------------------ writer

/// Collects metadata and tensors, then writes one GGUF v3 file. Metadata keys keep the order in
/// which they were first set; tensors keep the order in which they were added.
class GgufWriter {
 public:
  explicit GgufWriter(std::uint64_t alignment = 32);

  /// Sets (or replaces, keeping its position) a metadata key.
  void set(const std::string& key, GgufValue value);
  /// Adds a tensor. `shape` is outermost first (as everywhere in specdec); `data` holds the
  /// tensor's bytes in `dtype`'s layout. Throws on a duplicate name or a size that does not
  /// match the shape.
  void add_tensor(const std::string& name, DType dtype, std::vector<std::uint64_t> shape,
                  std::vector<std::byte> data);

  /// The whole file.
  [[nodiscard]] std::vector<std::byte> bytes() const;
  /// Writes bytes() to `path`; throws specdec::Error naming the file on failure.
  void write(const std::string& path) const;

  /// Convenience constructors of metadata values.
  static GgufValue u32(std::uint32_t v);
  static GgufValue str(std::string v);

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> data;
  };
  std::uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

// ------------------------------------------------------------------------ model conversion

/// What convert_gguf() did to one tensor.
struct ConvertedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;  ///< outermost first
  DType from = DType::f32;
  DType to = DType::f32;
  std::uint64_t bytes_before = 0;
  std::uint64_t bytes_after = 0;
};

struct ConvertReport {
  std::vector<ConvertedTensor> tensors;
  std::uint64_t file_bytes = 0;  ///< size of the file written
};

/// Rewrites the GGUF file `in` as `out` with every weight matrix (2 or more dimensions whose
/// rows hold whole blocks) in `type` (DType::f16 or DType::q8_0); vectors (norms, biases) are
/// stored as F32, as llama.cpp does. Input tensors may be F32, F16 or BF16. All metadata is
/// copied, except general.file_type (set to llama.cpp's value for the new type) and, for Q8_0,
/// general.quantization_version (2, ggml's current). Throws specdec::Error naming the file.
ConvertReport convert_gguf(const std::string& in, const std::string& out, DType type);

}  // namespace specdec
