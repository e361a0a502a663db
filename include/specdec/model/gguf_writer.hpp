#pragma once
// Writing GGUF v3 files, and converting a model's weights to one of llama.cpp's file types.
//
// This is what makes the bundled demo models: `specdec convert IN.gguf OUT.gguf --type q8_0`
// rewrites the trained F32 pair with every weight matrix in Q8_0 and the norms kept in F32, as
// llama.cpp's llama-quantize does. Any preset of specdec/model/quant_mix.hpp works the same way
// (Q4_K_M, Q5_K_S, Q6_K, ...): the recipe picks each tensor's type as llama-quantize does, and
// quant::quantize writes the blocks byte for byte as ggml's reference quantisers (tests/model
// and tests/cli check both against llama.cpp and the gguf Python package).
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
#include "specdec/model/quant_mix.hpp"
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
  /// Writes bytes() to `path` (streamed tensor by tensor); throws specdec::Error naming the file
  /// on failure.
  void write(const std::string& path) const;

  /// Convenience constructors of metadata values.
  static GgufValue u32(std::uint32_t v);
  static GgufValue str(std::string v);

 private:
  /// Everything before the first tensor's data: header, metadata, tensor infos, padding.
  [[nodiscard]] std::vector<std::byte> header() const;
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

/// Rewrites the GGUF file `in` as `out` with every tensor in the type llama-quantize's recipe
/// gives it under `preset` (quant_mix_type; `pure`: llama-quantize --pure). Tensors the recipe
/// leaves alone (norms, biases) and tensors already in their new type are copied unchanged;
/// the others are dequantised (any type specdec reads) and quantised again. All metadata is
/// copied, except general.file_type (the preset's llama_ftype) and general.quantization_version
/// (2, ggml's current), as llama-quantize sets them. Throws specdec::Error naming the file and
/// tensor (an input type specdec cannot read, a recipe type it cannot write).
ConvertReport convert_gguf(const std::string& in, const std::string& out, const QuantPreset& preset,
                           bool pure = false);

}  // namespace specdec
