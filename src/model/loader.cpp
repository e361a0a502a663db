// load_model (format detection) and validate_model_weights (the tensors a config implies).
#include "specdec/model/loader.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/model/gguf.hpp"
#include "specdec/model/hf.hpp"

namespace specdec {

namespace fs = std::filesystem;

namespace {

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

void validate_model_weights(const ModelConfig& c, const WeightStore& weights) {
  // Every tensor this config implies, with its shape (outermost first), checked as it is named so
  // that a file contradicting a huge config fails at the first absent tensor.
  const std::uint64_t vocab = c.vocab_size, dim = c.dim, ffn = c.ffn_dim, q_dim = c.q_dim(),
                      kv_dim = c.kv_dim();
  std::size_t expected_count = 0;
  auto expect = [&](const std::string& name, std::vector<std::uint64_t> shape,
                    bool float_only = false) {
    ++expected_count;
    const Tensor* t = weights.find(name);
    if (t == nullptr) throw Error(fmt::format("missing tensor '{}'", name));
    if (t->shape != shape)
      throw Error(fmt::format("tensor '{}' has shape {}, but the config implies {}", name,
                              shape_string(t->shape), shape_string(shape)));
    // Norms, biases and rope factors are read as plain vectors, never quantised.
    if (float_only && !is_float_dtype(t->dtype))
      throw Error(
          fmt::format("tensor '{}' is {}; norms, biases and rope factors must be F32, F16 or BF16",
                      name, dtype_name(t->dtype)));
  };
  expect("token_embd.weight", {vocab, dim});
  expect("output_norm.weight", {dim}, true);
  if (!c.tied_embeddings) expect("output.weight", {vocab, dim});
  if (c.rope_freq_factors) expect("rope_freqs.weight", {c.head_dim / 2}, true);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    const std::string blk = fmt::format("blk.{}.", i);
    expect(blk + "attn_norm.weight", {dim}, true);
    expect(blk + "attn_q.weight", {q_dim, dim});
    expect(blk + "attn_k.weight", {kv_dim, dim});
    expect(blk + "attn_v.weight", {kv_dim, dim});
    expect(blk + "attn_output.weight", {dim, q_dim});
    expect(blk + "ffn_norm.weight", {dim}, true);
    expect(blk + "ffn_gate.weight", {ffn, dim});
    expect(blk + "ffn_up.weight", {ffn, dim});
    expect(blk + "ffn_down.weight", {dim, ffn});
    if (c.qkv_bias) {
      expect(blk + "attn_q.bias", {q_dim}, true);
      expect(blk + "attn_k.bias", {kv_dim}, true);
      expect(blk + "attn_v.bias", {kv_dim}, true);
    }
    if (c.qk_norm) {
      expect(blk + "attn_q_norm.weight", {c.head_dim}, true);
      expect(blk + "attn_k_norm.weight", {c.head_dim}, true);
    }
  }
  // Anything else would be silently ignored by the backends (an unsupported bias, a layer beyond
  // block_count, ...): refuse it. Names are unique and all expected ones are present, so there is
  // an extra tensor exactly when the counts differ.
  if (weights.tensors().size() == expected_count) return;
  const auto is_expected = [&](const std::string& name) {
    if (name == "token_embd.weight" || name == "output_norm.weight") return true;
    if (name == "output.weight") return !c.tied_embeddings;
    if (name == "rope_freqs.weight") return c.rope_freq_factors;
    unsigned layer = 0;
    char suffix[32] = {};
    if (std::sscanf(name.c_str(), "blk.%u.%31s", &layer, suffix) != 2 || layer >= c.n_layers ||
        name != fmt::format("blk.{}.{}", layer, suffix))
      return false;
    const std::string_view s = suffix;
    if (s == "attn_q.bias" || s == "attn_k.bias" || s == "attn_v.bias") return c.qkv_bias;
    if (s == "attn_q_norm.weight" || s == "attn_k_norm.weight") return c.qk_norm;
    return s == "attn_norm.weight" || s == "attn_q.weight" || s == "attn_k.weight" ||
           s == "attn_v.weight" || s == "attn_output.weight" || s == "ffn_norm.weight" ||
           s == "ffn_gate.weight" || s == "ffn_up.weight" || s == "ffn_down.weight";
  };
  for (const auto& [name, t] : weights.tensors())
    if (!is_expected(name))
      throw Error(fmt::format("unexpected tensor '{}' (shape {}) for this {} config", name,
                              shape_string(t.shape), c.architecture));
}

LoadedModel load_model(const std::string& path) {
  const fs::path p = path;
  std::error_code ec;
  const auto status = fs::status(p, ec);
  if (ec || !fs::exists(status)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(status) || p.filename() == "config.json") return load_hf_model(path);

  char magic[4] = {};
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  in.read(magic, sizeof magic);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF")
    return load_gguf_model(read_gguf(path));
  const fs::path folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if ((p.extension() == ".safetensors" || p.filename() == "model.safetensors.index.json") &&
      fs::exists(folder / "config.json"))
    return load_hf_model(folder.string());
  throw Error(path +
              ": neither a GGUF file nor a Hugging Face folder (config.json + model.safetensors)");
}

}  // namespace specdec
