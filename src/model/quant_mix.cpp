// llama.cpp's file types and per-tensor type recipe: see specdec/model/quant_mix.hpp.
#include "specdec/model/quant_mix.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

#include <fmt/format.h>

#include "specdec/model/llama_schema.hpp"

namespace specdec {

namespace {

// llama.h's llama_ftype values; the order is llama-quantize's --help order.
constexpr QuantPreset kPresets[] = {
    {"Q4_0", 2, DType::q4_0},    {"Q4_1", 3, DType::q4_1},    {"Q5_0", 8, DType::q5_0},
    {"Q5_1", 9, DType::q5_1},    {"Q2_K", 10, DType::q2_k},   {"Q3_K_S", 11, DType::q3_k},
    {"Q3_K_M", 12, DType::q3_k}, {"Q3_K_L", 13, DType::q3_k}, {"Q4_K_S", 14, DType::q4_k},
    {"Q4_K_M", 15, DType::q4_k}, {"Q5_K_S", 16, DType::q5_k}, {"Q5_K_M", 17, DType::q5_k},
    {"Q6_K", 18, DType::q6_k},   {"Q8_0", 7, DType::q8_0},    {"F16", 1, DType::f16},
    {"BF16", 32, DType::bf16},   {"F32", 0, DType::f32},
};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// The recipe's category of a tensor (llama.cpp's tensor_get_category), from the schema; tensors
/// outside it (other architectures' files given to convert) have no rule of their own.
QuantRole role_of(std::string_view name) {
  const auto named = parse_gguf_tensor_name(name);
  return named ? named->spec->quant_role : QuantRole::other;
}

/// Whether llama-quantize converts the tensor at all (tensor_allows_quantization): matrices
/// named *.weight, except norms and the tensors of other architectures it lists.
bool quantizable(const MixTensor& t) {
  const std::string_view suffix = "weight";
  if (t.dims < 2 || t.name.size() < suffix.size() ||
      t.name.substr(t.name.size() - suffix.size()) != suffix)
    return false;
  return t.name.find("_norm.weight") == std::string_view::npos &&
         t.name.find("ffn_gate_inp.weight") == std::string_view::npos;
}

/// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/// llama.cpp's LLM_TYPE_70B, for which attn_v gets one more step: 80-layer llama models with
/// grouped-query attention (Llama 2/3 70B) and 80-layer qwen2 (Qwen2 72B).
bool is_70b(const MixModel& m) {
  if (m.layers != 80) return false;
  if (m.architecture == "qwen2") return true;
  return (m.architecture == "llama" || m.architecture == "mistral") && m.heads != m.kv_heads;
}

/// tensor_type_fallback: a row that does not hold whole blocks of `t`.
DType fallback(DType t, std::uint64_t row_length) {
  if (row_length % dtype_block_elems(t) == 0) return t;
  DType smaller = t;
  switch (t) {
    case DType::q2_k:
    case DType::q3_k:
      smaller = DType::q4_0;
      break;
    case DType::q4_k:
      smaller = DType::q5_0;
      break;
    case DType::q5_k:
      smaller = DType::q5_1;
      break;
    case DType::q6_k:
      smaller = DType::q8_0;
      break;
    default:  // a 32-block: nothing smaller to fall back to
      break;
  }
  return row_length % dtype_block_elems(smaller) == 0 ? smaller : DType::f16;
}

/// llama_tensor_get_type_impl for the presets of kPresets. One branch per preset, as llama.cpp
/// writes its rules, even where two presets pick the same type.
// NOLINTBEGIN(bugprone-branch-clone)
DType mix_rule(const QuantPreset& p, const MixModel& m, const MixTensor& t) {
  const std::string_view preset = p.name;
  const QuantRole role = role_of(t.name);
  const int i = t.index >= 0 ? t.index : tensor_layer(t.name);
  const int n = static_cast<int>(m.layers);
  const std::uint32_t gqa = m.kv_heads == 0 ? 1 : m.heads / m.kv_heads;
  DType type = p.base;
  if (role == QuantRole::output || (role == QuantRole::token_embd && !m.has_output)) {
    // The output projection is the most sensitive matrix: Q6_K unless the preset is Q8_0.
    if (t.row_length % dtype_block_elems(type) != 0)
      type = DType::q8_0;
    else if (type != DType::q8_0)
      type = DType::q6_k;
  } else if (role == QuantRole::attn_v) {
    if (preset == "Q2_K")
      type = gqa >= 4 ? DType::q4_k : DType::q3_k;
    else if (preset == "Q3_K_M")
      type = i < 2 ? DType::q5_k : DType::q4_k;
    else if (preset == "Q3_K_L")
      type = DType::q5_k;
    else if ((preset == "Q4_K_M" || preset == "Q5_K_M") && use_more_bits(i, n))
      type = DType::q6_k;
    else if (preset == "Q4_K_S" && i < 4)
      type = DType::q5_k;
    // 70B models share each attn_v among 8 heads: it is small, so give it more bits.
    if (is_70b(m) && (type == DType::q3_k || type == DType::q4_k)) type = DType::q5_k;
  } else if (role == QuantRole::ffn_down) {
    if (preset == "Q2_K")
      type = DType::q3_k;
    else if (preset == "Q3_K_M")
      type = i < n / 16 ? DType::q5_k : DType::q4_k;
    else if (preset == "Q3_K_L")
      type = DType::q5_k;
    else if (preset == "Q4_K_M") {
      if (use_more_bits(i, n)) type = DType::q6_k;
    } else if (preset == "Q5_K_M" && use_more_bits(i, n))
      type = DType::q6_k;
    else if (preset == "Q4_K_S" && i < n / 8)
      type = DType::q5_k;
  } else if (role == QuantRole::attn_output) {
    if (preset == "Q2_K")
      type = DType::q3_k;
    else if (preset == "Q3_K_M")
      type = DType::q4_k;
    else if (preset == "Q3_K_L")
      type = DType::q5_k;
  }
  return type;
}
// NOLINTEND(bugprone-branch-clone)

std::string make_preset_names() {
  std::string names;
  for (const QuantPreset& p : kPresets)
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  return names;
}

}  // namespace

std::span<const QuantPreset> quant_presets() noexcept { return kPresets; }

const QuantPreset* find_quant_preset(std::string_view name) noexcept {
  // llama-quantize's aliases: the bare K-quant names mean their _M mix.
  for (const auto& [alias, target] :
       {std::pair{"Q3_K", "Q3_K_M"}, std::pair{"Q4_K", "Q4_K_M"}, std::pair{"Q5_K", "Q5_K_M"}})
    if (same_name(name, alias)) name = target;
  for (const QuantPreset& p : kPresets)
    if (same_name(name, p.name)) return &p;
  return nullptr;
}

std::string_view quant_preset_names() noexcept {
  static const std::string names = make_preset_names();
  return names;
}

int tensor_layer(std::string_view name) noexcept {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return -1;
  int layer = -1;
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size();
  const auto [ptr, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc{} || ptr == begin || ptr == end || *ptr != '.') return -1;
  return layer;
}

DType quant_mix_type(const QuantPreset& preset, const MixModel& model, const MixTensor& tensor,
                     bool pure) {
  if (!quantizable(tensor)) return tensor.current;
  // Float presets convert every matrix; only quantised presets have a mix and fallbacks.
  if (is_float_dtype(preset.base)) return preset.base;
  const DType type = pure ? preset.base : mix_rule(preset, model, tensor);
  return fallback(type, tensor.row_length);
}

}  // namespace specdec
