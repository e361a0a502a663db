// libFuzzer target: arbitrary bytes through the safetensors reader, the Hugging Face tensor-name
// mapping and weight validation, and (the same bytes as text) the config.json parser. Any outcome
// but a specdec::Error or success is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "specdec/model/hf.hpp"
#include "specdec/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const specdec::SafetensorsFile st = specdec::parse_safetensors(bytes, "fuzz.safetensors");
    volatile std::byte sink{};
    specdec::WeightStore store;
    for (const auto& t : st.tensors) {
      if (t.nbytes() > 0) sink = t.data[0] ^ t.data[t.nbytes() - 1];
      const auto name = specdec::hf_to_gguf_tensor_name(t.name);
      if (!name || !t.dtype || store.find(*name)) continue;
      store.add({*name, *t.dtype, t.shape, t.data, static_cast<std::size_t>(t.nbytes())});
    }
    // A small fixed config, so that the shape checks run against whatever the input holds.
    specdec::ModelConfig config;
    config.architecture = "llama";
    config.vocab_size = 8;
    config.dim = config.ffn_dim = config.head_dim = 4;
    config.n_layers = config.n_heads = config.n_kv_heads = 1;
    config.context_length = 16;
    specdec::validate_model_weights(config, store);
  } catch (const specdec::Error&) {
  }
  try {
    (void)specdec::parse_hf_config(std::string_view(reinterpret_cast<const char*>(data), size),
                                   "fuzz/config.json");
  } catch (const specdec::Error&) {
  }
  return 0;
}
