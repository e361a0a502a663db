#pragma once
// Small random-weight models held in memory (no files): a WeightStore whose tensors point into
// buffers the returned shared_ptr keeps alive. Used by the invariance tests for every weight
// dtype and architecture option.

#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/config.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/random_blocks.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::test {

struct RandomModel {
  ModelConfig config;
  std::shared_ptr<const WeightStore> weights;
};

/// Encodes floats as a tensor of `dtype` (rows x cols), appending the bytes to `storage`.
inline std::vector<std::byte> encode(const std::vector<float>& v, DType dtype) {
  std::vector<std::byte> out(v.size() / dtype_block_elems(dtype) * dtype_block_bytes(dtype));
  quant::quantize(dtype, v, out);
  return out;
}

/// A Llama-family model: `matrix_dtype` for the projection matrices and the embedding, f32 norms
/// and biases. Weights are scaled for unit-variance activations: normal values quantised to the
/// type where specdec can write it, else random blocks (random_blocks(): the K-quants, IQ4_NL,
/// IQ4_XS) of about the same magnitude.
inline RandomModel make_random_model(const ModelConfig& config, DType matrix_dtype, unsigned seed) {
  struct Holder {
    WeightStore store;
    std::vector<std::vector<std::byte>> buffers;
  };
  auto holder = std::make_shared<Holder>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<std::uint64_t> shape, float scale,
                 float offset, DType dtype) {
    std::size_t count = 1;
    for (auto d : shape) count *= d;
    if (quant::can_quantize(dtype)) {
      std::vector<float> v(count);
      for (auto& x : v) x = offset + scale * normal(rng);
      holder->buffers.push_back(encode(v, dtype));
    } else {
      holder->buffers.emplace_back(count / dtype_block_elems(dtype) * dtype_block_bytes(dtype));
      random_blocks(dtype, holder->buffers.back(), rng(), 2.0f * scale);
    }
    const auto& bytes = holder->buffers.back();
    holder->store.add(Tensor{name, dtype, std::move(shape), bytes.data(), bytes.size()});
  };
  // Every tensor the Llama-family schema gives this config. Matrices scaled by 1/sqrt(fan-in)
  // (the embedding: unit scale); norm weights and rope factors about 1; biases about 0.
  const ModelConfig& c = config;
  for_each_llama_tensor(c, [&](const LlamaTensorSpec& spec, std::size_t layer) {
    const std::string name = gguf_tensor_name(spec.id, layer);
    if (spec.is_matrix()) {
      const float fan_in = static_cast<float>(extent_size(spec.cols, c));
      const float scale = spec.id == LlamaTensor::token_embd ? 1.0f : 1.0f / std::sqrt(fan_in);
      add(name, expected_shape(spec, c), scale, 0.0f, matrix_dtype);
    } else {
      add(name, expected_shape(spec, c), 0.1f, spec.gguf.ends_with(".bias") ? 0.0f : 1.0f,
          DType::f32);
    }
  });
  return {config, std::shared_ptr<const WeightStore>(holder, &holder->store)};
}

/// A small Llama: 2 layers, dim 64, 4 heads of 16, 2 KV heads, FFN 96, vocab 160 (rows and
/// columns that are not all multiples of 32, to reach the kernels' tail paths).
inline ModelConfig small_llama() {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 160;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.context_length = 96;
  c.rope_layout = RopeLayout::adjacent_pairs;
  return c;
}

/// For the 256-weight blocks: the same as small_llama with every matrix width a multiple of 256
/// (dim 256, 4 heads of 64, FFN 512); the vocabulary (160 rows) still is not a multiple of 16.
inline ModelConfig small_k() {
  ModelConfig c = small_llama();
  c.dim = 256;
  c.head_dim = 64;
  c.ffn_dim = 512;
  return c;
}

/// Qwen-like: q/k/v biases, q/k norms, rotate_half, tied embeddings, head_dim != dim / heads.
inline ModelConfig small_qwen() {
  ModelConfig c = small_llama();
  c.architecture = "qwen3";
  c.head_dim = 24;
  c.qkv_bias = true;
  c.qk_norm = true;
  c.tied_embeddings = true;
  c.rope_layout = RopeLayout::rotate_half;
  c.rope_theta = 1e6f;
  return c;
}

}  // namespace specdec::test
