#pragma once
// The tensors of a Llama-family decoder (llama, mistral, qwen2, qwen3), one row each: the GGUF
// name, the Hugging Face name, the shape as a function of ModelConfig, whether it is a matrix
// (any weight type) or a vector (F32/F16/BF16 only), the config flag it depends on, and the role
// llama-quantize's type recipe gives it. Everything that knows a tensor reads this table: the
// loader's validation (specdec/model/loader.hpp), the Hugging Face renaming (hf.hpp), the
// quantisation recipe (quant_mix.hpp) and the weight binding of both backends. Adding a tensor or
// an architecture flag is one row here plus the field the forward pass reads.
//
// Names follow llama.cpp's LLM_TENSOR_NAMES (src/llama-arch.cpp) and transformers'
// LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM parameter names.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/model/config.hpp"
#include "specdec/model/weights.hpp"

namespace specdec {

/// Every tensor a Llama-family file may hold, in kLlamaTensors order.
enum class LlamaTensor : std::uint8_t {
  token_embd,
  output_norm,
  output,
  rope_freqs,
  attn_norm,
  attn_q,
  attn_k,
  attn_v,
  attn_output,
  attn_q_bias,
  attn_k_bias,
  attn_v_bias,
  attn_q_norm,
  attn_k_norm,
  ffn_norm,
  ffn_gate,
  ffn_up,
  ffn_down,
};

/// A length along one axis, as a function of the config.
enum class Extent : std::uint8_t {
  none,           ///< no such axis: the tensor is a vector
  vocab,          ///< vocab_size
  dim,            ///< dim
  ffn,            ///< ffn_dim
  q_dim,          ///< n_heads * head_dim
  kv_dim,         ///< n_kv_heads * head_dim
  head_dim,       ///< head_dim
  half_head_dim,  ///< head_dim / 2 (one rotary frequency per pair)
};

/// When a tensor is part of a model.
enum class Presence : std::uint8_t {
  always,
  untied_output,      ///< !tied_embeddings (otherwise the embedding is the output head)
  rope_freq_factors,  ///< Llama 3.1+ GGUF files: precomputed llama3 rope scaling
  qkv_bias,           ///< Qwen2
  qk_norm,            ///< Qwen3
};

/// The categories llama-quantize's type recipe tells apart (llama.cpp's tensor_get_category).
enum class QuantRole : std::uint8_t {
  output,
  token_embd,
  attn_v,
  attn_k,
  attn_q,
  attn_output,
  ffn_down,
  other,  ///< norms, biases, ffn_gate, ffn_up: no rule of their own in the presets
};

struct LlamaTensorSpec {
  LlamaTensor id;
  bool per_layer;         ///< named "blk.N." + gguf and "model.layers.N." + hf
  std::string_view gguf;  ///< GGUF name (after "blk.N." when per_layer)
  /// Hugging Face name (after "model.layers.N." when per_layer); empty when checkpoints have no
  /// such tensor (rope_freqs: transformers computes the scaling from config.json)
  std::string_view hf;
  Extent rows;  ///< outermost dimension (GGUF ne[1]); a vector's length
  Extent cols;  ///< innermost dimension (GGUF ne[0]); none for a vector
  Presence presence;
  QuantRole quant_role;

  /// A matrix [rows, cols] may have any weight type; a vector [rows] (norms, biases, rope
  /// factors) is read as floats and must be F32, F16 or BF16.
  [[nodiscard]] constexpr bool is_matrix() const noexcept { return cols != Extent::none; }
};

// clang-format off
inline constexpr std::array<LlamaTensorSpec, 18> kLlamaTensors{{
//  id                         layer  GGUF name              Hugging Face name                  rows (outer)           cols (inner)     present when                 quantisation role
  {LlamaTensor::token_embd,    false, "token_embd.weight",   "model.embed_tokens.weight",       Extent::vocab,         Extent::dim,     Presence::always,            QuantRole::token_embd},
  {LlamaTensor::output_norm,   false, "output_norm.weight",  "model.norm.weight",               Extent::dim,           Extent::none,    Presence::always,            QuantRole::other},
  {LlamaTensor::output,        false, "output.weight",       "lm_head.weight",                  Extent::vocab,         Extent::dim,     Presence::untied_output,     QuantRole::output},
  {LlamaTensor::rope_freqs,    false, "rope_freqs.weight",   "",                                Extent::half_head_dim, Extent::none,    Presence::rope_freq_factors, QuantRole::other},
  {LlamaTensor::attn_norm,     true,  "attn_norm.weight",    "input_layernorm.weight",          Extent::dim,           Extent::none,    Presence::always,            QuantRole::other},
  {LlamaTensor::attn_q,        true,  "attn_q.weight",       "self_attn.q_proj.weight",         Extent::q_dim,         Extent::dim,     Presence::always,            QuantRole::attn_q},
  {LlamaTensor::attn_k,        true,  "attn_k.weight",       "self_attn.k_proj.weight",         Extent::kv_dim,        Extent::dim,     Presence::always,            QuantRole::attn_k},
  {LlamaTensor::attn_v,        true,  "attn_v.weight",       "self_attn.v_proj.weight",         Extent::kv_dim,        Extent::dim,     Presence::always,            QuantRole::attn_v},
  {LlamaTensor::attn_output,   true,  "attn_output.weight",  "self_attn.o_proj.weight",         Extent::dim,           Extent::q_dim,   Presence::always,            QuantRole::attn_output},
  {LlamaTensor::attn_q_bias,   true,  "attn_q.bias",         "self_attn.q_proj.bias",           Extent::q_dim,         Extent::none,    Presence::qkv_bias,          QuantRole::other},
  {LlamaTensor::attn_k_bias,   true,  "attn_k.bias",         "self_attn.k_proj.bias",           Extent::kv_dim,        Extent::none,    Presence::qkv_bias,          QuantRole::other},
  {LlamaTensor::attn_v_bias,   true,  "attn_v.bias",         "self_attn.v_proj.bias",           Extent::kv_dim,        Extent::none,    Presence::qkv_bias,          QuantRole::other},
  {LlamaTensor::attn_q_norm,   true,  "attn_q_norm.weight",  "self_attn.q_norm.weight",         Extent::head_dim,      Extent::none,    Presence::qk_norm,           QuantRole::other},
  {LlamaTensor::attn_k_norm,   true,  "attn_k_norm.weight",  "self_attn.k_norm.weight",         Extent::head_dim,      Extent::none,    Presence::qk_norm,           QuantRole::other},
  {LlamaTensor::ffn_norm,      true,  "ffn_norm.weight",     "post_attention_layernorm.weight", Extent::dim,           Extent::none,    Presence::always,            QuantRole::other},
  {LlamaTensor::ffn_gate,      true,  "ffn_gate.weight",     "mlp.gate_proj.weight",            Extent::ffn,           Extent::dim,     Presence::always,            QuantRole::other},
  {LlamaTensor::ffn_up,        true,  "ffn_up.weight",       "mlp.up_proj.weight",              Extent::ffn,           Extent::dim,     Presence::always,            QuantRole::other},
  {LlamaTensor::ffn_down,      true,  "ffn_down.weight",     "mlp.down_proj.weight",            Extent::dim,           Extent::ffn,     Presence::always,            QuantRole::ffn_down},
}};
// clang-format on

/// The row of a tensor.
constexpr const LlamaTensorSpec& llama_tensor(LlamaTensor id) {
  return kLlamaTensors[static_cast<std::size_t>(id)];
}

/// Whether `spec` is part of a model with this config.
bool is_present(const LlamaTensorSpec& spec, const ModelConfig& config) noexcept;
inline bool is_present(LlamaTensor id, const ModelConfig& config) noexcept {
  return is_present(llama_tensor(id), config);
}

/// The length `extent` stands for under this config.
std::size_t extent_size(Extent extent, const ModelConfig& config) noexcept;

/// The shape the config implies, outermost first: {rows, cols} for a matrix, {rows} for a vector.
std::vector<std::uint64_t> expected_shape(const LlamaTensorSpec& spec, const ModelConfig& config);

/// Calls fn(spec, layer) for every tensor a model with this config has, in the table's order:
/// the global tensors (layer 0), then layer 0's, layer 1's, and so on. The model generators
/// (tools/make_random_gguf, the tests' random models) write their tensors this way.
template <class Fn>
void for_each_llama_tensor(const ModelConfig& config, Fn&& fn) {
  for (const LlamaTensorSpec& spec : kLlamaTensors)
    if (!spec.per_layer && is_present(spec, config)) fn(spec, std::size_t{0});
  for (std::size_t layer = 0; layer < config.n_layers; ++layer)
    for (const LlamaTensorSpec& spec : kLlamaTensors)
      if (spec.per_layer && is_present(spec, config)) fn(spec, layer);
}

/// The GGUF name: "token_embd.weight", "blk.3.attn_q.weight" (`layer` ignored for global tensors).
std::string gguf_tensor_name(LlamaTensor id, std::size_t layer = 0);

/// A GGUF tensor name read back: its row and layer (0 for global tensors).
struct NamedLlamaTensor {
  const LlamaTensorSpec* spec;
  std::size_t layer;
};
/// nullopt for a name that is not in the table, or "blk.N." with N not in canonical decimal.
std::optional<NamedLlamaTensor> parse_gguf_tensor_name(std::string_view name);
/// The same for a Hugging Face name ("model.layers.3.self_attn.q_proj.weight").
std::optional<NamedLlamaTensor> parse_hf_tensor_name(std::string_view name);

/// Tensor `id` of layer `layer`, present and with the shape the config implies, else a
/// specdec::Error: "missing tensor 'NAME'", "tensor 'NAME' has shape [..], but the config
/// implies [..]". The loader's validation and both backends' weight binding read weights this
/// way.
const Tensor& llama_weight(const WeightStore& weights, const ModelConfig& config, LlamaTensor id,
                           std::size_t layer = 0);
/// The float32 values of a vector tensor (norm weights, biases, rope factors) of any float type.
std::vector<float> llama_vector(const WeightStore& weights, const ModelConfig& config,
                                LlamaTensor id, std::size_t layer = 0);

}  // namespace specdec
