#pragma once
// Small random Llama models whose matrices are quantised (K-quants, 32-block types, 16-bit types,
// mixed within a projection as llama-quantize's _M presets mix them), held twice: as the file
// would store them and dequantised to F32 by the model layer (the same weights, bit for bit), so
// that cuda::Transformer on the quantised store can be compared with cpu::Transformer on the F32
// store, which every CPU backend version runs.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "random_weights.hpp"
#include "specdec/common.hpp"
#include "specdec/model/config.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::test {

/// The type of each matrix of a layer.
struct LayerTypes {
  DType q, k, v, o, gate, up, down;
};

struct QuantisedModel {
  ModelConfig config;
  std::shared_ptr<WeightStore> quantised = std::make_shared<WeightStore>();
  std::shared_ptr<WeightStore> f32 = std::make_shared<WeightStore>();  ///< the same, dequantised
  std::vector<std::unique_ptr<std::uint8_t[]>> buffers;                ///< the tensors' bytes
};

namespace detail {

/// Adds `bytes` as tensor `name` of type `type` and shape `shape` to `store` (kept alive by m).
inline void add_tensor(QuantisedModel& m, WeightStore& store, const std::string& name, DType type,
                       std::vector<std::uint64_t> shape, const std::vector<std::uint8_t>& bytes) {
  auto owned = std::make_unique<std::uint8_t[]>(bytes.size());
  std::memcpy(owned.get(), bytes.data(), bytes.size());
  store.add(Tensor{name, type, std::move(shape), reinterpret_cast<const std::byte*>(owned.get()),
                   bytes.size()});
  m.buffers.push_back(std::move(owned));
}

/// A matrix [rows, cols] of type t with |w| ~ scale, in both stores.
inline void add_matrix(QuantisedModel& m, const std::string& name, DType t, std::size_t rows,
                       std::size_t cols, float scale, std::uint32_t seed) {
  const auto bytes = random_weights(t, rows, cols, seed, scale);
  add_tensor(m, *m.quantised, name, t, {rows, cols}, bytes);
  const auto values = dequantized(t, bytes, rows, cols);
  std::vector<std::uint8_t> f32(values.size() * sizeof(float));
  std::memcpy(f32.data(), values.data(), f32.size());
  add_tensor(m, *m.f32, name, DType::f32, {rows, cols}, f32);
}

/// A per-channel F32 vector around 1 (norm weights), in both stores.
inline void add_norm(QuantisedModel& m, const std::string& name, std::size_t size,
                     std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<std::uint8_t> bytes(size * sizeof(float));
  for (std::size_t i = 0; i < size; ++i) {
    const float v = dist(rng);
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof v);
  }
  add_tensor(m, *m.quantised, name, DType::f32, {size}, bytes);
  add_tensor(m, *m.f32, name, DType::f32, {size}, bytes);
}

}  // namespace detail

/// The type layer `types` gives matrix `id` (the embedding and the head have their own).
inline DType matrix_type(LlamaTensor id, const LayerTypes& types, DType embed, DType head) {
  switch (id) {
    case LlamaTensor::token_embd:
      return embed;
    case LlamaTensor::output:
      return head;
    case LlamaTensor::attn_q:
      return types.q;
    case LlamaTensor::attn_k:
      return types.k;
    case LlamaTensor::attn_v:
      return types.v;
    case LlamaTensor::attn_output:
      return types.o;
    case LlamaTensor::ffn_gate:
      return types.gate;
    case LlamaTensor::ffn_up:
      return types.up;
    case LlamaTensor::ffn_down:
      return types.down;
    default:
      throw Error("quantised_model: no type for " + std::string(llama_tensor(id).gguf));
  }
}

/// A random model of config c (untied head): every tensor the Llama-family schema gives c, layer
/// i's matrices of types layers[i % size], embedding and head of the given types. Matrices are
/// scaled so that activations stay O(1); vectors (norm weights) are about 1.
inline std::shared_ptr<const QuantisedModel> make_quantised_model(
    const ModelConfig& c, const std::vector<LayerTypes>& layers, DType embed, DType head,
    std::uint32_t seed) {
  auto m = std::make_shared<QuantisedModel>();
  m->config = c;
  auto scale = [](std::size_t cols) { return 1.5f / std::sqrt(static_cast<float>(cols)); };
  for_each_llama_tensor(c, [&](const LlamaTensorSpec& spec, std::size_t layer) {
    const std::string name = gguf_tensor_name(spec.id, layer);
    // One seed per tensor: 32 per layer, the global tensors below the first layer's.
    const auto s = seed + 32 * static_cast<std::uint32_t>(spec.per_layer ? layer + 1 : 0) +
                   static_cast<std::uint32_t>(spec.id);
    const std::size_t rows = extent_size(spec.rows, c);
    if (!spec.is_matrix()) {
      detail::add_norm(*m, name, rows, s);
      return;
    }
    const std::size_t cols = extent_size(spec.cols, c);
    const float w = spec.id == LlamaTensor::token_embd ? 1.0f
                    : spec.id == LlamaTensor::output   ? 3.0f * scale(cols)
                                                       : scale(cols);
    detail::add_matrix(*m, name, matrix_type(spec.id, layers[layer % layers.size()], embed, head),
                       rows, cols, w, s);
  });
  return m;
}

/// A Llama config of the given widths (2 layers, 64-wide heads unless dim is smaller).
inline ModelConfig small_config(std::size_t dim, std::size_t ffn, std::size_t vocab,
                                std::size_t head_dim, std::size_t n_heads, std::size_t n_kv) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = vocab;
  c.dim = dim;
  c.n_layers = 2;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv;
  c.head_dim = head_dim;
  c.ffn_dim = ffn;
  c.context_length = 128;
  c.rope_layout = RopeLayout::rotate_half;
  c.bos_token = 1;
  c.eos_token = 2;
  c.validate();
  return c;
}

/// The K-quant model: Q4_K_M-like mixes (Q4_K q / k with a Q6_K v, so that the fused QKV
/// projection has two parts; Q3_K / Q2_K gate and Q5_K up; Q6_K / IQ4_XS down), Q4_K embedding,
/// Q6_K head. dim and ffn are multiples of 256.
inline std::shared_ptr<const QuantisedModel> k_quant_model() {
  const ModelConfig c = small_config(256, 512, 320, 64, 4, 2);
  return make_quantised_model(c,
                              {LayerTypes{DType::q4_k, DType::q4_k, DType::q6_k, DType::q5_k,
                                          DType::q3_k, DType::q5_k, DType::q6_k},
                               LayerTypes{DType::q5_k, DType::q5_k, DType::q5_k, DType::iq4_xs,
                                          DType::q2_k, DType::q2_k, DType::iq4_xs}},
                              DType::q4_k, DType::q6_k, 500);
}

/// The 32-block model (dim 96, not a multiple of 256): every 32-block type, plus a BF16 and an
/// F16 matrix (16-bit types other than Options::weights' go through the prefill dequantisation).
inline std::shared_ptr<const QuantisedModel> block32_model() {
  const ModelConfig c = small_config(96, 160, 200, 32, 3, 1);
  return make_quantised_model(c,
                              {LayerTypes{DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                                          DType::q5_1, DType::iq4_nl, DType::bf16},
                               LayerTypes{DType::q4_0, DType::q4_0, DType::q8_0, DType::f16,
                                          DType::iq4_nl, DType::q5_1, DType::q5_0}},
                              DType::q5_1, DType::q8_0, 600);
}

/// Every matrix Q8_0: the CPU backend multiplies it with activations quantised to Q8_0.
inline std::shared_ptr<const QuantisedModel> q8_0_model() {
  const ModelConfig c = small_config(128, 256, 256, 32, 4, 2);
  const DType q = DType::q8_0;
  return make_quantised_model(c, {LayerTypes{q, q, q, q, q, q, q}}, q, q, 700);
}

}  // namespace specdec::test
