// Reading the Llama-family tensor table: see specdec/model/llama_schema.hpp.
#include "specdec/model/llama_schema.hpp"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/model/rope.hpp"

namespace specdec {

namespace {

/// llama_tensor(id) indexes the table by id.
constexpr bool rows_in_id_order() {
  for (std::size_t i = 0; i < kLlamaTensors.size(); ++i)
    if (static_cast<std::size_t>(kLlamaTensors[i].id) != i) return false;
  return true;
}
static_assert(rows_in_id_order(), "kLlamaTensors: row i must describe LlamaTensor(i)");

/// Splits "<prefix>N.<rest>" into N and rest; N in canonical decimal ("01" would alias "1").
std::optional<std::pair<std::size_t, std::string_view>> split_layer(std::string_view name,
                                                                    std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  std::size_t layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  const auto digits = static_cast<std::size_t>(end - name.data());
  if (ec != std::errc{} || digits == 0 || (digits > 1 && name.front() == '0') ||
      digits >= name.size() || name[digits] != '.')
    return std::nullopt;
  return std::pair{layer, name.substr(digits + 1)};
}

/// The row whose `field` (global or per-layer) is `name`, after the layer prefix when per-layer.
template <typename Field>
std::optional<NamedLlamaTensor> parse_name(std::string_view name, std::string_view layer_prefix,
                                           Field field) {
  for (const LlamaTensorSpec& spec : kLlamaTensors)
    if (!spec.per_layer && !(spec.*field).empty() && name == spec.*field)
      return NamedLlamaTensor{&spec, 0};
  const auto split = split_layer(name, layer_prefix);
  if (!split) return std::nullopt;
  for (const LlamaTensorSpec& spec : kLlamaTensors)
    if (spec.per_layer && split->second == spec.*field)
      return NamedLlamaTensor{&spec, split->first};
  return std::nullopt;
}

}  // namespace

bool is_present(const LlamaTensorSpec& spec, const ModelConfig& c) noexcept {
  switch (spec.presence) {
    case Presence::always:
      return true;
    case Presence::untied_output:
      return !c.tied_embeddings;
    case Presence::rope_freq_factors:
      return c.rope_freq_factors;
    case Presence::qkv_bias:
      return c.qkv_bias;
    case Presence::qk_norm:
      return c.qk_norm;
  }
  return false;
}

std::size_t extent_size(Extent extent, const ModelConfig& c) noexcept {
  switch (extent) {
    case Extent::none:
      return 1;
    case Extent::vocab:
      return c.vocab_size;
    case Extent::dim:
      return c.dim;
    case Extent::ffn:
      return c.ffn_dim;
    case Extent::q_dim:
      return c.q_dim();
    case Extent::kv_dim:
      return c.kv_dim();
    case Extent::head_dim:
      return c.head_dim;
    case Extent::half_head_dim:
      return c.head_dim / 2;
  }
  return 0;
}

std::vector<std::uint64_t> expected_shape(const LlamaTensorSpec& spec, const ModelConfig& c) {
  std::vector<std::uint64_t> shape{extent_size(spec.rows, c)};
  if (spec.is_matrix()) shape.push_back(extent_size(spec.cols, c));
  return shape;
}

std::string gguf_tensor_name(LlamaTensor id, std::size_t layer) {
  const LlamaTensorSpec& spec = llama_tensor(id);
  return spec.per_layer ? fmt::format("blk.{}.{}", layer, spec.gguf) : std::string(spec.gguf);
}

std::optional<NamedLlamaTensor> parse_gguf_tensor_name(std::string_view name) {
  return parse_name(name, "blk.", &LlamaTensorSpec::gguf);
}

std::optional<NamedLlamaTensor> parse_hf_tensor_name(std::string_view name) {
  return parse_name(name, "model.layers.", &LlamaTensorSpec::hf);
}

const Tensor& llama_weight(const WeightStore& weights, const ModelConfig& c, LlamaTensor id,
                           std::size_t layer) {
  const Tensor& t = weights.get(gguf_tensor_name(id, layer));
  if (const auto shape = expected_shape(llama_tensor(id), c); t.shape != shape)
    throw Error(fmt::format("tensor '{}' has shape [{}], but the config implies [{}]", t.name,
                            fmt::join(t.shape, ", "), fmt::join(shape, ", ")));
  return t;
}

std::vector<float> llama_vector(const WeightStore& weights, const ModelConfig& c, LlamaTensor id,
                                std::size_t layer) {
  const LlamaTensorSpec& spec = llama_tensor(id);
  return load_f32_vector(weights, gguf_tensor_name(id, layer), extent_size(spec.rows, c));
}

}  // namespace specdec
