#pragma once
// The model-level facts both backends read from the same weights: rotary inverse frequencies and
// the small per-channel vectors (norm weights, biases) as float32.

#include <cstddef>
#include <string_view>
#include <vector>

#include "specdec/model/config.hpp"
#include "specdec/model/weights.hpp"

namespace specdec {

/// The float32 values of a one-dimensional tensor of any weight type (norm weights, biases,
/// rope_freqs), or a specdec::Error naming the tensor when it is absent or has another size.
std::vector<float> load_f32_vector(const WeightStore& weights, std::string_view name,
                                   std::size_t size);

/// Rotary inverse frequencies [head_dim / 2] as Hugging Face computes them in float32:
/// 1 / theta^(2i / head_dim), then the model's scaling (linear, llama3 as transformers'
/// _compute_llama3_parameters, or the GGUF rope_freqs.weight factors). The CPU and CUDA backends
/// both rotate by float(position) * inv_freq[i].
std::vector<float> rope_inv_freq(const ModelConfig& config, const WeightStore& weights);

}  // namespace specdec
