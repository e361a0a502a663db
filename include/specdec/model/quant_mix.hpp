#pragma once
// llama.cpp's file types ("presets": Q4_K_M, Q5_K_S, Q8_0, ...) and the recipe that decides the
// type of every tensor under one: `specdec convert --type PRESET` and make_random_gguf use it,
// so that their files hold the same tensor types as `llama-quantize MODEL OUT PRESET` writes.
//
// The recipe is llama.cpp's llama_tensor_get_type (src/llama-quant.cpp) for the architectures
// specdec loads (llama, mistral, qwen2, qwen3; no experts) and the presets whose types specdec
// can write, without an importance matrix:
//   * only matrices named *.weight are quantised (not norms, biases or 1-D tensors);
//   * output.weight, and token_embd.weight when the model ties them (no output.weight), take Q6_K
//     (Q8_0 stays Q8_0; a row that does not hold whole blocks of the preset's type, Q8_0);
//   * the K-quant mixes give some tensors more bits: attn_v and ffn_down of the first and last
//     eighth of the layers and of every third layer between (use_more_bits), attn_output and
//     ffn_down under Q2_K and Q3_K_*, attn_v of the first layers under Q4_K_S / Q3_K_M ...;
//   * a row whose length is not a multiple of the type's block falls back: Q2_K, Q3_K -> Q4_0,
//     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 when not even 32 divides it (the
//     Qwen2.5 0.5B's 896-wide rows are why its Q4_K_M file is mostly Q5_0).
// tests/model/test_quant_mix.cpp compares every tensor's type with what llama.cpp's
// llama_model_quantize wrote for three models and every preset (tools/make_kquant_fixtures.py).

#include <cstdint>
#include <span>
#include <string_view>

#include "specdec/model/dtype.hpp"

namespace specdec {

/// One of llama.cpp's file types.
struct QuantPreset {
  const char* name;         ///< llama-quantize's name: "Q4_K_M"
  std::uint32_t file_type;  ///< llama_ftype, stored as general.file_type
  DType base;               ///< the type of the matrices the recipe does not single out
};

/// Every preset specdec can write: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S,
/// Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K.
std::span<const QuantPreset> quant_presets() noexcept;
/// A preset by name, any case; also llama-quantize's aliases Q3_K (Q3_K_M), Q4_K (Q4_K_M) and
/// Q5_K (Q5_K_M). nullptr for other names.
const QuantPreset* find_quant_preset(std::string_view name) noexcept;
/// "F32, F16, ..., Q6_K": every preset name, for error messages and --help.
std::string_view quant_preset_names() noexcept;

/// What the recipe reads about the model (from the GGUF metadata and tensor list).
struct MixModel {
  std::string_view architecture;  ///< general.architecture
  std::uint32_t layers = 0;       ///< {arch}.block_count
  std::uint32_t heads = 0;        ///< {arch}.attention.head_count
  std::uint32_t kv_heads = 0;     ///< {arch}.attention.head_count_kv (GQA factor heads / kv_heads)
  bool has_output = true;         ///< an output.weight tensor exists (else the embedding is tied)
};

/// What the recipe reads about one tensor.
struct MixTensor {
  std::string_view name;         ///< GGUF name: "blk.3.attn_v.weight"
  std::size_t dims = 0;          ///< number of dimensions
  std::uint64_t row_length = 0;  ///< the innermost dimension (GGUF ne[0])
  DType current = DType::f32;    ///< its type in the input file
  /// Position of the tensor among the tensors of its kind (attn_v, ffn_down): llama.cpp counts
  /// them as it visits the tensors, in layer order since 2024, so this is the layer number
  /// (tensor_layer(name)). Files made by older llama.cpp visited them in file order, often
  /// lexicographic (blk.0, blk.1, blk.10, ...): pass that ordinal to reproduce them.
  int index = -1;
};

/// The layer number of "blk.N.*" tensors, -1 for others.
int tensor_layer(std::string_view name) noexcept;

/// The type llama-quantize gives `tensor` under `preset` (without an importance matrix).
/// `pure` is llama-quantize's --pure: every quantised matrix takes the preset's base type, with
/// only the row-length fallback. Tensors the recipe does not quantise keep their current type.
DType quant_mix_type(const QuantPreset& preset, const MixModel& model, const MixTensor& tensor,
                     bool pure = false);

}  // namespace specdec
