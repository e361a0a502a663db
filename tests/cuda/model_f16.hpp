#pragma once
// The tinyllama pair with every 2-D f32 tensor rounded to F16 (1-D norms stay f32), so that the
// CPU and the CUDA backend see bit-identical weights and their differences are arithmetic only.

#include <cuda_fp16.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "specdec/cuda/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

namespace specdec::test {

struct F16Model {
  ModelConfig config;
  std::shared_ptr<const WeightStore> file;  // the f32 tensors that were not converted point here
  std::vector<std::unique_ptr<std::uint16_t[]>> buffers;
  std::shared_ptr<WeightStore> store = std::make_shared<WeightStore>();
  std::shared_ptr<const void> keep_alive;
};

/// Loads `file` of the pair (e.g. "draft-f32.gguf"); null when the pair is not there.
inline std::shared_ptr<const F16Model> load_f16(const std::string& file) {
  const auto path = tinyllama_pair();
  if (path.empty()) return nullptr;
  const LoadedModel loaded = load_model((path / file).string());
  auto m = std::make_shared<F16Model>();
  m->config = loaded.config;
  m->file = loaded.weights;
  for (const auto& [name, t] : loaded.weights->tensors()) {
    Tensor copy = t;
    if (t.dtype == DType::f32 && t.shape.size() == 2) {
      const std::size_t count = t.elements();
      auto bits = std::make_unique<std::uint16_t[]>(count);
      for (std::size_t i = 0; i < count; ++i) {
        float v;
        std::memcpy(&v, t.data + i * 4, 4);
        const __half h = __float2half_rn(v);
        std::memcpy(&bits[i], &h, 2);
      }
      copy.dtype = DType::f16;
      copy.data = reinterpret_cast<const std::byte*>(bits.get());
      copy.nbytes = count * 2;
      m->buffers.push_back(std::move(bits));
    }
    m->store->add(copy);
  }
  return m;
}

/// A copy of `m` whose output head gives logit NaN to `token` in every row (its row of
/// output.weight set to NaN): a model with bad logits, for the error paths.
inline std::shared_ptr<const F16Model> with_nan_logit(std::shared_ptr<const F16Model> base,
                                                      token_t token) {
  const F16Model& m = *base;
  auto out = std::make_shared<F16Model>();
  out->config = m.config;
  out->file = m.file;
  for (const auto& [name, t] : m.store->tensors()) {
    Tensor copy = t;
    if (name == "output.weight") {
      REQUIRE(t.dtype == DType::f16);
      const std::size_t count = t.elements();
      auto bits = std::make_unique<std::uint16_t[]>(count);
      std::memcpy(bits.get(), t.data, count * 2);
      const std::size_t cols = t.shape.back();
      for (std::size_t c = 0; c < cols; ++c)
        bits[static_cast<std::size_t>(token) * cols + c] = 0x7E00;  // f16 NaN
      copy.data = reinterpret_cast<const std::byte*>(bits.get());
      out->buffers.push_back(std::move(bits));
    }
    out->store->add(copy);
  }

  // The other tensors still point into base's buffers: keep it alive.
  out->keep_alive = std::move(base);
  return out;
}

/// Options that run the same code paths with fewer emulated threads per block (faster to
/// emulate); on a GPU the defaults.
inline cuda::Options emulator_friendly(cuda::Options o = {}) {
#if defined(SPECDEC_CUDA_EMULATION)
  o.norm_threads = 64;
  o.attention_warps = 2;
  o.sampling_threads = 64;
#endif
  return o;
}

}  // namespace specdec::test
