// load_model (format detection) and validate_model_weights (the tensors a config implies).
#include "specdec/model/loader.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/model/gguf.hpp"
#include "specdec/model/hf.hpp"
#include "specdec/model/llama_schema.hpp"

namespace specdec {

namespace fs = std::filesystem;

namespace {

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

/// Anything else would be silently ignored by the backends (an unsupported bias, a layer beyond
/// block_count, ...): refuse it.
void refuse_unexpected_tensors(const ModelConfig& c, const WeightStore& weights) {
  for (const auto& [name, t] : weights.tensors()) {
    const auto named = parse_gguf_tensor_name(name);
    if (!named || !is_present(*named->spec, c) || named->layer >= c.n_layers)
      throw Error(fmt::format("unexpected tensor '{}' (shape {}) for this {} config", name,
                              shape_string(t.shape), c.architecture));
  }
}

/// A quantised block whose float16 scale is Inf or NaN makes all its weights Inf or NaN: the
/// text would be garbage or the logits NaN rounds later (llama.cpp runs such a file). Refused
/// here, naming the tensor and the block. The scan reads two bytes per block and so touches
/// every page once: 70 ms of a 254 ms load of the 1.1 GB Qwen2.5-Coder-1.5B Q4_K_M file with
/// its pages cached (docs/cli.md); the first forward would touch them anyway.
void check_finite_scales(const WeightStore& weights) {
  for (const auto& [name, t] : weights.tensors()) {
    const auto bad = find_non_finite_scale(t.dtype, t.data, t.nbytes);
    if (!bad) continue;
    const std::size_t per_block = dtype_block_elems(t.dtype);
    const std::size_t blocks_per_row = t.cols() / per_block;
    const std::size_t first = (bad->block % blocks_per_row) * per_block;
    throw Error(fmt::format(
        "tensor '{}' ({}): block {} (row {}, columns {}..{}) has a non-finite scale {} = {}: the "
        "file is damaged (every weight of that block would be {})",
        name, dtype_name(t.dtype), bad->block, bad->block / blocks_per_row, first,
        first + per_block - 1, bad->field, bad->value,
        std::isnan(bad->value) ? "NaN" : "infinite"));
  }
}

}  // namespace

void validate_model_weights(const ModelConfig& c, const WeightStore& weights) {
  // Every tensor this config implies, with its shape (outermost first), checked as it is named so
  // that a file contradicting a huge config fails at the first absent tensor.
  std::size_t expected_count = 0;
  auto expect = [&](const LlamaTensorSpec& spec, std::size_t layer) {
    ++expected_count;
    const Tensor& t = llama_weight(weights, c, spec.id, layer);  // present, with its shape
    // Norms, biases and rope factors are read as plain vectors, never quantised.
    if (!spec.is_matrix() && !is_float_dtype(t.dtype))
      throw Error(
          fmt::format("tensor '{}' is {}; norms, biases and rope factors must be F32, F16 or BF16",
                      t.name, dtype_name(t.dtype)));
  };
  for (const LlamaTensorSpec& spec : kLlamaTensors)
    if (!spec.per_layer && is_present(spec, c)) expect(spec, 0);
  for (std::size_t i = 0; i < c.n_layers; ++i)
    for (const LlamaTensorSpec& spec : kLlamaTensors)
      if (spec.per_layer && is_present(spec, c)) expect(spec, i);
  // Names are unique and all expected ones are present, so there is an extra tensor exactly
  // when the counts differ.
  if (weights.tensors().size() != expected_count) refuse_unexpected_tensors(c, weights);
  check_finite_scales(weights);
}

void check_draft_compatible(const LoadedModel& target, const LoadedModel& draft) {
  if (draft.config.vocab_size != target.config.vocab_size)
    throw Error(fmt::format(
        "the draft {} has a vocabulary of {} tokens but the target {} has {}: the pair must share "
        "one tokenizer",
        draft.source, draft.config.vocab_size, target.source, target.config.vocab_size));
  if (draft.tokenizer && target.tokenizer)
    check_same_vocabulary(*target.tokenizer, *draft.tokenizer);
}

LoadedModel load_model(const std::string& path) {
  const fs::path p = path;
  std::error_code ec;
  const auto status = fs::status(p, ec);
  if (ec || !fs::exists(status)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(status) && !fs::exists(p / "config.json", ec)) {
    // Not a Hugging Face folder: say what it holds that could be given instead.
    std::vector<std::string> ggufs;
    for (const auto& entry : fs::directory_iterator(p, ec))
      if (entry.path().extension() == ".gguf") ggufs.push_back(entry.path().filename().string());
    std::sort(ggufs.begin(), ggufs.end());
    if (ggufs.size() > 4) ggufs.resize(4);
    throw Error(fmt::format(
        "{}: a folder without config.json, so not a Hugging Face model folder (config.json + "
        "model.safetensors){}",
        path,
        ggufs.empty() ? std::string()
                      : fmt::format("; it holds {}: give the file", fmt::join(ggufs, ", "))));
  }
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
