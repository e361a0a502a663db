#pragma once
// ModelConfig: the hyper-parameters of a Llama-family decoder, whatever file they came from.

#include <cstddef>
#include <string>

#include "specdec/common.hpp"

namespace specdec {

/// How rotary embeddings pair the dimensions of a head.
enum class RopeLayout {
  /// (x[2i], x[2i+1]): Meta's reference code, llama.cpp's LLAMA_ROPE_TYPE_NORM, GGUF llama
  adjacent_pairs,
  rotate_half,  ///< (x[i], x[i + d/2]): Hugging Face transformers, llama.cpp's NEOX type (qwen2)
};

/// Llama-3 style frequency-dependent rope scaling (rope_scaling.rope_type == "llama3").
struct RopeScaling {
  enum class Kind { none, linear, llama3 };
  Kind kind = Kind::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  std::size_t original_context_length = 0;
};

const char* rope_layout_name(RopeLayout layout) noexcept;  ///< "adjacent_pairs" / "rotate_half"

struct ModelConfig {
  std::string architecture;  ///< "llama", "mistral", "qwen2", "qwen3"
  std::size_t vocab_size = 0;
  std::size_t dim = 0;  ///< embedding width
  std::size_t n_layers = 0;
  std::size_t n_heads = 0;
  std::size_t n_kv_heads = 0;  ///< grouped-query attention: n_heads % n_kv_heads == 0
  std::size_t head_dim = 0;    ///< usually dim / n_heads (Qwen3 may differ)
  std::size_t ffn_dim = 0;     ///< SwiGLU hidden width
  std::size_t context_length = 0;
  float rope_theta = 10000.0f;
  RopeLayout rope_layout = RopeLayout::adjacent_pairs;
  RopeScaling rope_scaling{};
  float rms_norm_eps = 1e-5f;
  bool qkv_bias = false;         ///< Qwen2
  bool qk_norm = false;          ///< Qwen3: RMSNorm over each head of q and k
  bool tied_embeddings = false;  ///< output head = token embedding
  /// GGUF files of Llama 3.1 and later carry their llama3 rope scaling precomputed as the tensor
  /// rope_freqs.weight [head_dim / 2]: rotary frequency i is divided by rope_freqs[i]. When set,
  /// that tensor is in the WeightStore and rope_scaling stays none.
  bool rope_freq_factors = false;
  token_t bos_token = -1;  ///< -1: none
  token_t eos_token = -1;
  token_t unk_token = -1;
  token_t pad_token = -1;

  /// Throws specdec::Error naming the first inconsistent field ("ModelConfig: n_heads (6) ...").
  void validate() const;

  /// Rows of attn_q (n_heads * head_dim) and of attn_k / attn_v (n_kv_heads * head_dim).
  [[nodiscard]] std::size_t q_dim() const noexcept { return n_heads * head_dim; }
  [[nodiscard]] std::size_t kv_dim() const noexcept { return n_kv_heads * head_dim; }
};

}  // namespace specdec
