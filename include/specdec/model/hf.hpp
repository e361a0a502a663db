#pragma once
// Hugging Face checkpoint folders: config.json + model.safetensors (or model.safetensors.index.json
// and its shards) + tokenizer.json or tokenizer.model (+ tokenizer_config.json).
//
// Tensors are renamed to the GGUF names (model.layers.3.self_attn.q_proj.weight ->
// blk.3.attn_q.weight, ...) and left in place: q_proj/k_proj keep Hugging Face's rotate_half row
// order, which ModelConfig::rope_layout records, instead of being permuted into llama.cpp's
// adjacent-pair order (permuting would mean copying the weights).

#include <optional>
#include <string>
#include <string_view>

#include "specdec/model/loader.hpp"

namespace specdec {

/// ModelConfig from the text of a config.json (LlamaForCausalLM, MistralForCausalLM,
/// Qwen2ForCausalLM, Qwen3ForCausalLM). `name` labels errors. rope_layout is rotate_half.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& name);

/// The GGUF name of a Hugging Face tensor name, nullopt when it is not one of the Llama-family
/// parameters (e.g. rotary_emb.inv_freq buffers of old checkpoints).
std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name);

/// Loads a folder; throws specdec::Error "<file>: <problem>".
LoadedModel load_hf_model(const std::string& folder);

}  // namespace specdec
