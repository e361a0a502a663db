#include "specdec/model/rope.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "specdec/model/dtype.hpp"
#include "specdec/model/llama_schema.hpp"

namespace specdec {

std::vector<float> load_f32_vector(const WeightStore& weights, std::string_view name,
                                   std::size_t size) {
  const Tensor& t = weights.get(name);
  if (t.elements() != size)
    throw Error(fmt::format("tensor {}: {} elements, expected {}", name, t.elements(), size));
  (void)dtype_row_bytes(t.dtype, size, "tensor " + t.name);  // whole blocks, or an Error
  std::vector<float> out(size);
  dequantize(t.dtype, t.data, out.data(), size);
  return out;
}

std::vector<float> rope_inv_freq(const ModelConfig& c, const WeightStore& weights) {
  const std::size_t half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (std::size_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[i] = 1.0f / std::pow(c.rope_theta, exponent);
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScaling::Kind::linear) {
    for (float& f : inv) f /= s.factor;
  } else if (s.kind == RopeScaling::Kind::llama3) {
    // transformers' _compute_llama3_parameters: long wavelengths scaled down by `factor`, short
    // ones kept, a smooth blend in between.
    const double old_len = static_cast<double>(s.original_context_length);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (float& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else {
        const float smooth = static_cast<float>((old_len / wavelen - s.low_freq_factor) /
                                                (s.high_freq_factor - s.low_freq_factor));
        f = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  if (c.rope_freq_factors) {
    const std::vector<float> factors = llama_vector(weights, c, LlamaTensor::rope_freqs);
    for (std::size_t i = 0; i < half; ++i) inv[i] /= factors[i];
  }
  return inv;
}

}  // namespace specdec
