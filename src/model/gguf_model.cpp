// From a parsed GGUF file to a model: the llama-family {arch}.* keys onto ModelConfig, the
// tokenizer.ggml.* keys onto a TokenizerSpec, the tensor infos into a WeightStore.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "specdec/model/gguf.hpp"

namespace specdec {

namespace {

bool is_supported_architecture(const std::string& arch) {
  return arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3";
}

token_t token_id(const GgufFile& g, const char* key) {
  const auto id = g.get_uint(key);
  if (!id) return -1;
  if (*id > static_cast<std::uint64_t>(std::numeric_limits<token_t>::max()))
    g.fail(fmt::format("{} ({}) is not a valid token id", key, *id));
  return static_cast<token_t>(*id);
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& g) {
  ModelConfig c;
  const auto arch = g.get_string("general.architecture");
  if (!arch) g.fail("missing metadata key 'general.architecture'");
  if (!is_supported_architecture(*arch))
    g.fail(fmt::format("unsupported architecture '{}' (specdec reads llama, mistral, qwen2, qwen3)",
                       *arch));
  c.architecture = *arch;
  const std::string prefix = *arch + ".";

  auto required_uint = [&](const char* suffix) -> std::size_t {
    const auto v = g.get_uint(prefix + suffix);
    if (!v) g.fail(fmt::format("missing metadata key '{}{}'", prefix, suffix));
    return static_cast<std::size_t>(*v);
  };
  auto optional_uint = [&](const char* suffix) { return g.get_uint(prefix + suffix); };
  auto optional_float = [&](const char* suffix) { return g.get_float(prefix + suffix); };

  c.dim = required_uint("embedding_length");
  c.n_layers = required_uint("block_count");
  c.ffn_dim = required_uint("feed_forward_length");
  c.n_heads = required_uint("attention.head_count");
  c.n_kv_heads = optional_uint("attention.head_count_kv").value_or(c.n_heads);
  c.context_length = required_uint("context_length");
  if (const auto key_length = optional_uint("attention.key_length")) {
    c.head_dim = static_cast<std::size_t>(*key_length);
  } else {
    if (c.n_heads == 0 || c.dim % c.n_heads != 0)
      g.fail(
          fmt::format("embedding_length {} is not a multiple of head_count {} and no "
                      "attention.key_length is given",
                      c.dim, c.n_heads));
    c.head_dim = c.dim / c.n_heads;
  }
  if (const auto value_length = optional_uint("attention.value_length");
      value_length && *value_length != c.head_dim)
    g.fail(fmt::format("attention.value_length {} differs from the key length {} (not supported)",
                       *value_length, c.head_dim));
  if (const auto rot = optional_uint("rope.dimension_count"); rot && *rot != c.head_dim)
    g.fail(fmt::format(
        "rope.dimension_count {} differs from the head dimension {}: partial rotary embeddings are "
        "not supported",
        *rot, c.head_dim));
  const auto eps = optional_float("attention.layer_norm_rms_epsilon");
  if (!eps)
    g.fail(fmt::format("missing metadata key '{}attention.layer_norm_rms_epsilon'", prefix));
  c.rms_norm_eps = static_cast<float>(*eps);
  c.rope_theta = static_cast<float>(optional_float("rope.freq_base").value_or(10000.0));

  // Rope scaling: rope.scaling.type ("none", "linear", "yarn", ...) with rope.scaling.factor;
  // older files write rope.scale_linear. Llama 3.1's scaling arrives as the rope_freqs tensor.
  const auto scaling_type = g.get_string(prefix + "rope.scaling.type");
  const auto scaling_factor = optional_float("rope.scaling.factor");
  if (scaling_type && *scaling_type != "none" && *scaling_type != "linear")
    g.fail(fmt::format("rope scaling type '{}' is not supported (none, linear)", *scaling_type));
  if (scaling_type == "linear") {
    if (!scaling_factor)
      g.fail(fmt::format("missing metadata key '{}rope.scaling.factor'", prefix));
    c.rope_scaling.kind = RopeScaling::Kind::linear;
    c.rope_scaling.factor = static_cast<float>(*scaling_factor);
  } else if (const auto scale_linear = optional_float("rope.scale_linear");
             !scaling_type && scale_linear && *scale_linear != 1.0) {
    c.rope_scaling.kind = RopeScaling::Kind::linear;
    c.rope_scaling.factor = static_cast<float>(*scale_linear);
  }
  if (c.rope_scaling.kind != RopeScaling::Kind::none)
    c.rope_scaling.original_context_length =
        static_cast<std::size_t>(optional_uint("rope.scaling.original_context_length").value_or(0));
  c.rope_freq_factors = g.find_tensor("rope_freqs.weight") != nullptr;

  // llama.cpp rotates adjacent pairs for llama/mistral (LLAMA_ROPE_TYPE_NORM) and halves for the
  // Qwen family (LLAMA_ROPE_TYPE_NEOX); its converters permute q/k accordingly.
  c.rope_layout =
      (*arch == "qwen2" || *arch == "qwen3") ? RopeLayout::rotate_half : RopeLayout::adjacent_pairs;
  c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = *arch == "qwen3";
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;

  // Vocabulary: the explicit key, else the tokenizer's token list, else the embedding rows.
  if (const auto v = optional_uint("vocab_size")) {
    c.vocab_size = static_cast<std::size_t>(*v);
  } else if (const auto* tokens = g.get_array("tokenizer.ggml.tokens", GgufType::string)) {
    c.vocab_size = tokens->size();
  } else if (const auto* embd = g.find_tensor("token_embd.weight");
             embd && embd->shape.size() == 2) {
    c.vocab_size = static_cast<std::size_t>(embd->shape[0]);
  }
  c.bos_token = token_id(g, "tokenizer.ggml.bos_token_id");
  c.eos_token = token_id(g, "tokenizer.ggml.eos_token_id");
  c.unk_token = token_id(g, "tokenizer.ggml.unknown_token_id");
  c.pad_token = token_id(g, "tokenizer.ggml.padding_token_id");

  try {
    c.validate();
  } catch (const Error& e) {
    g.fail(e.what());
  }
  return c;
}

std::optional<TokenizerSpec> gguf_tokenizer_spec(const GgufFile& g) {
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model || *model == "none" || *model == "no_vocab") return std::nullopt;
  TokenizerSpec spec;
  spec.source = g.name;
  spec.model = *model;
  spec.pre = g.get_string("tokenizer.ggml.pre").value_or("");

  const auto* tokens = g.get_array("tokenizer.ggml.tokens", GgufType::string);
  if (tokens == nullptr) g.fail("missing metadata key 'tokenizer.ggml.tokens'");
  spec.tokens.reserve(tokens->size());
  for (const auto& t : *tokens) spec.tokens.push_back(*t.as_string());

  auto check_count = [&](const char* key, std::size_t n) {
    if (n != tokens->size())
      g.fail(fmt::format("{} has {} entries but tokenizer.ggml.tokens has {}", key, n,
                         tokens->size()));
  };
  if (const auto* scores = g.get_array("tokenizer.ggml.scores", GgufType::float32)) {
    check_count("tokenizer.ggml.scores", scores->size());
    spec.scores.reserve(scores->size());
    for (const auto& s : *scores) spec.scores.push_back(static_cast<float>(*s.as_float()));
  }
  if (const auto* types = g.get_array("tokenizer.ggml.token_type", GgufType::int32)) {
    check_count("tokenizer.ggml.token_type", types->size());
    spec.token_types.reserve(types->size());
    for (const auto& t : *types) spec.token_types.push_back(static_cast<std::int32_t>(*t.as_int()));
  }
  if (const auto* merges = g.get_array("tokenizer.ggml.merges", GgufType::string)) {
    spec.merges.reserve(merges->size());
    for (const auto& m : *merges) spec.merges.push_back(*m.as_string());
  }

  auto special = [&](const char* key) {
    const token_t id = token_id(g, key);
    if (id >= 0 && static_cast<std::size_t>(id) >= spec.tokens.size())
      g.fail(
          fmt::format("{} ({}) is outside the tokenizer's {} tokens", key, id, spec.tokens.size()));
    return id;
  };
  spec.bos = special("tokenizer.ggml.bos_token_id");
  spec.eos = special("tokenizer.ggml.eos_token_id");
  spec.unk = special("tokenizer.ggml.unknown_token_id");
  spec.pad = special("tokenizer.ggml.padding_token_id");

  // llama.cpp's defaults when the keys are absent: SentencePiece models prepend BOS and a dummy
  // space; byte-level BPE models do neither.
  const bool sentencepiece = spec.model == "llama";
  spec.add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(sentencepiece);
  spec.add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  spec.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(sentencepiece);
  // GGUF has no byte-fallback flag: llama.cpp falls back to the <0xXX> tokens when the vocabulary
  // has them (token type 6 = byte).
  spec.byte_fallback =
      std::find(spec.token_types.begin(), spec.token_types.end(), 6) != spec.token_types.end();
  return spec;
}

LoadedModel load_gguf_model(const GgufFile& g) {
  LoadedModel m;
  m.config = gguf_model_config(g);
  m.source = g.name;
  m.format = fmt::format("GGUF v{}", g.version);
  m.name = g.get_string("general.name").value_or("");
  m.chat_template = g.get_string("tokenizer.chat_template");

  auto store = std::make_shared<WeightStore>();
  if (g.file) store->add_file(g.file);
  for (const auto& info : g.tensors) {
    if (!info.dtype)
      g.fail(fmt::format("tensor '{}' has type {}, which specdec does not support ({})", info.name,
                         ggml_type_name(info.ggml_type), supported_dtype_names()));
    Tensor t;
    t.name = info.name;
    t.dtype = *info.dtype;
    t.shape = info.shape;
    t.data = info.data;
    t.nbytes = static_cast<std::size_t>(info.nbytes);
    store->add(std::move(t));  // names are unique: parse_gguf checked
  }
  try {
    validate_model_weights(m.config, *store);
  } catch (const Error& e) {
    g.fail(e.what());
  }
  m.weights = std::move(store);

  if (auto spec = gguf_tokenizer_spec(g)) {
    if (spec->tokens.size() > m.config.vocab_size)
      g.fail(fmt::format("the tokenizer has {} tokens but the model's vocabulary is {}",
                         spec->tokens.size(), m.config.vocab_size));
    try {
      m.tokenizer = make_tokenizer(*spec);
    } catch (const Error& e) {
      g.fail(fmt::format("tokenizer: {}", e.what()));
    }
  }
  return m;
}

}  // namespace specdec
