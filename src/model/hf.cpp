// Hugging Face folders: config.json onto ModelConfig, safetensors shards into a WeightStore under
// GGUF names, tokenizer.json / tokenizer.model into a tokenizer. See specdec/model/hf.hpp.
#include "specdec/model/hf.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/model/llama_schema.hpp"
#include "specdec/model/safetensors.hpp"

namespace specdec {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail_in(const std::string& file, const std::string& problem) {
  throw Error(file + ": " + problem);
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_in(path.string(), "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_in(path.string(), "read error");
  return std::move(text).str();
}

json parse_json(std::string_view text, const std::string& name) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail_in(name, fmt::format("invalid JSON: {}", e.what()));
  }
}

/// Typed access to config.json fields with errors naming the field. A JSON null counts as absent,
/// as transformers treats it (e.g. "head_dim": null).
class JsonFields {
 public:
  JsonFields(const json& object, std::string name) : j_(object), name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& problem) const { fail_in(name_, problem); }
  [[nodiscard]] const std::string& name() const { return name_; }

  [[nodiscard]] const json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] std::optional<std::uint64_t> uint(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_unsigned())
      fail(fmt::format("\"{}\" must be a non-negative integer, not {}", key, v->dump()));
    return v->get<std::uint64_t>();
  }
  [[nodiscard]] std::size_t required_uint(const char* key) const {
    const auto v = uint(key);
    if (!v) fail(fmt::format("missing \"{}\"", key));
    return static_cast<std::size_t>(*v);
  }
  [[nodiscard]] std::optional<double> number(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail(fmt::format("\"{}\" must be a number, not {}", key, v->dump()));
    return v->get<double>();
  }
  [[nodiscard]] std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(fmt::format("\"{}\" must be true or false, not {}", key, v->dump()));
    return v->get<bool>();
  }
  [[nodiscard]] std::optional<std::string> string(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(fmt::format("\"{}\" must be a string, not {}", key, v->dump()));
    return v->get<std::string>();
  }
  /// A token id, or the first of a list of ids (Llama 3 lists several eos ids).
  [[nodiscard]] token_t token(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return -1;
    const json* id = v->is_array() && !v->empty() ? &v->front() : v;
    if (!id->is_number_unsigned() || id->get<std::uint64_t>() > std::numeric_limits<token_t>::max())
      fail(fmt::format("\"{}\" is not a valid token id: {}", key, v->dump()));
    return static_cast<token_t>(id->get<std::uint64_t>());
  }

 private:
  const json& j_;
  std::string name_;
};

std::string architecture_of(const json& j, const JsonFields& f) {
  static constexpr std::pair<std::string_view, std::string_view> kClasses[] = {
      {"LlamaForCausalLM", "llama"},
      {"MistralForCausalLM", "mistral"},
      {"Qwen2ForCausalLM", "qwen2"},
      {"Qwen3ForCausalLM", "qwen3"},
  };
  if (const auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    const json& first = it->front();
    if (first.is_string())
      for (const auto& [cls, arch] : kClasses)
        if (first.get<std::string>() == cls) return std::string(arch);
    f.fail(fmt::format(
        "unsupported architecture {} (specdec reads LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM, Qwen3ForCausalLM)",
        first.dump()));
  }
  const auto model_type = f.string("model_type");
  for (const auto& [cls, arch] : kClasses)
    if (model_type == arch) return std::string(arch);
  f.fail(fmt::format("unsupported or missing model_type \"{}\" and no \"architectures\"",
                     model_type.value_or("")));
}

/// Rope settings. transformers < 5 writes "rope_theta" and "rope_scaling" ({"rope_type" or
/// "type": "llama3", "factor", ...} or null); transformers >= 5 writes both into
/// "rope_parameters" ({"rope_theta", "rope_type", "factor", ...}).
void read_rope(const JsonFields& f, ModelConfig& c) {
  const json* params = f.find("rope_parameters");
  const json* scaling = params != nullptr ? params : f.find("rope_scaling");
  c.rope_theta = static_cast<float>(f.number("rope_theta").value_or(10000.0));
  if (scaling == nullptr) return;
  const char* what = params != nullptr ? "rope_parameters" : "rope_scaling";
  if (!scaling->is_object()) f.fail(fmt::format("\"{}\" must be an object or null", what));
  const JsonFields rf(*scaling, fmt::format("{}: {}", f.name(), what));
  if (params != nullptr)
    c.rope_theta = static_cast<float>(rf.number("rope_theta").value_or(c.rope_theta));
  const std::string type = rf.string("rope_type").value_or(rf.string("type").value_or("default"));
  auto number = [&](const char* key) {
    const auto v = rf.number(key);
    if (!v) rf.fail(fmt::format("missing \"{}\" for rope type {}", key, type));
    return static_cast<float>(*v);
  };
  RopeScaling& s = c.rope_scaling;
  if (type == "default") return;
  if (type == "linear") {
    s.kind = RopeScaling::Kind::linear;
    s.factor = number("factor");
  } else if (type == "llama3") {
    s.kind = RopeScaling::Kind::llama3;
    s.factor = number("factor");
    s.low_freq_factor = number("low_freq_factor");
    s.high_freq_factor = number("high_freq_factor");
    const auto ctx = rf.uint("original_max_position_embeddings");
    if (!ctx) rf.fail("missing \"original_max_position_embeddings\" for rope type llama3");
    s.original_context_length = static_cast<std::size_t>(*ctx);
  } else {
    rf.fail(fmt::format("rope type \"{}\" is not supported (default, linear, llama3)", type));
  }
}

/// The chat template of a Hugging Face folder: tokenizer_config.json's "chat_template" (a
/// string, or a list of {"name", "template"} of which "default" is taken, as transformers
/// does), else the chat_template.jinja that recent transformers versions write beside it.
std::optional<std::string> read_hf_chat_template(const fs::path& dir) {
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const std::string name = config_path.string();
    const json config = parse_json(read_text_file(config_path), name);
    if (const auto it = config.find("chat_template"); config.is_object() && it != config.end()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_array()) {
        for (const json& entry : *it)
          if (entry.is_object() && entry.value("name", json()) == "default" &&
              entry.contains("template") && entry["template"].is_string())
            return entry["template"].get<std::string>();
        fail_in(name, "\"chat_template\" lists named templates but none named \"default\"");
      }
      if (!it->is_null())
        fail_in(name, fmt::format("\"chat_template\" must be a string or a list of named "
                                  "templates, not {}",
                                  it->type_name()));
    }
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) return read_text_file(jinja);
  return std::nullopt;
}

}  // namespace

ModelConfig parse_hf_config(std::string_view json_text, const std::string& name) {
  const json j = parse_json(json_text, name);
  if (!j.is_object()) fail_in(name, "config is not a JSON object");
  const JsonFields f(j, name);

  ModelConfig c;
  c.architecture = architecture_of(j, f);
  c.vocab_size = f.required_uint("vocab_size");
  c.dim = f.required_uint("hidden_size");
  c.ffn_dim = f.required_uint("intermediate_size");
  c.n_layers = f.required_uint("num_hidden_layers");
  c.n_heads = f.required_uint("num_attention_heads");
  c.n_kv_heads = static_cast<std::size_t>(f.uint("num_key_value_heads").value_or(c.n_heads));
  if (const auto hd = f.uint("head_dim")) {
    c.head_dim = static_cast<std::size_t>(*hd);
  } else {
    if (c.n_heads == 0 || c.dim % c.n_heads != 0)
      f.fail(fmt::format(
          "hidden_size {} is not a multiple of num_attention_heads {} and no head_dim is given",
          c.dim, c.n_heads));
    c.head_dim = c.dim / c.n_heads;
  }
  c.context_length = f.required_uint("max_position_embeddings");
  c.rms_norm_eps =
      static_cast<float>(f.number("rms_norm_eps").value_or(1e-6));  // transformers' default
  read_rope(f, c);
  c.rope_layout = RopeLayout::rotate_half;
  c.tied_embeddings = f.boolean("tie_word_embeddings").value_or(false);

  if (const auto act = f.string("hidden_act"); act && *act != "silu")
    f.fail(fmt::format("hidden_act \"{}\" is not supported (silu)", *act));
  if (const auto p = f.number("partial_rotary_factor"); p && *p != 1.0)
    f.fail("partial_rotary_factor != 1 is not supported");
  if (f.boolean("mlp_bias").value_or(false)) f.fail("mlp_bias is not supported");
  // Qwen2 always has q/k/v biases (and none on o_proj); elsewhere attention_bias puts biases on
  // all four projections, which specdec does not implement.
  c.qkv_bias = c.architecture == "qwen2";
  if (f.boolean("attention_bias").value_or(false) && !c.qkv_bias)
    f.fail("attention_bias (biases on q/k/v/o projections) is not supported");
  c.qk_norm = c.architecture == "qwen3";
  // Sliding-window attention equals full attention while the context fits in the window, so the
  // usable context is capped there rather than implementing the window.
  bool sliding = c.architecture == "mistral" || f.boolean("use_sliding_window").value_or(false);
  if (const json* types = f.find("layer_types"); types != nullptr && types->is_array())
    for (const auto& t : *types)
      sliding = sliding || (t.is_string() && t.get<std::string>() == "sliding_attention");
  if (const auto window = f.uint("sliding_window");
      sliding && window && *window > 0 && *window < c.context_length)
    c.context_length = static_cast<std::size_t>(*window);

  c.bos_token = f.token("bos_token_id");
  c.eos_token = f.token("eos_token_id");
  c.pad_token = f.token("pad_token_id");
  try {
    c.validate();
  } catch (const Error& e) {
    fail_in(name, e.what());
  }
  return c;
}

std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf) {
  const auto named = parse_hf_tensor_name(hf);
  if (!named) return std::nullopt;
  return gguf_tensor_name(named->spec->id, named->layer);
}

namespace {

/// Shard file names from model.safetensors.index.json, in first-use order, each checked to be a
/// plain file name inside the folder; also the tensor -> shard map to cross-check.
std::vector<std::string> read_shard_index(const fs::path& index_path,
                                          std::map<std::string, std::string>& weight_map) {
  const std::string name = index_path.string();
  const json j = parse_json(read_text_file(index_path), name);
  const auto it = j.is_object() ? j.find("weight_map") : j.end();
  if (it == j.end() || !it->is_object()) fail_in(name, "missing \"weight_map\" object");
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (const auto& [tensor, file] : it->items()) {
    if (!file.is_string())
      fail_in(name, fmt::format("weight_map entry of '{}' is not a string", tensor));
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos ||
        shard.find('\\') != std::string::npos || shard == "." || shard == "..")
      fail_in(name, fmt::format("shard name \"{}\" of '{}' is not a file name in the folder", shard,
                                tensor));
    weight_map.emplace(tensor, shard);
    if (seen.insert(shard).second) shards.push_back(shard);
  }
  if (shards.empty()) fail_in(name, "\"weight_map\" lists no tensors");
  return shards;
}

}  // namespace

LoadedModel load_hf_model(const std::string& folder) {
  fs::path dir = folder;
  if (fs::is_regular_file(dir) && dir.filename() == "config.json") dir = dir.parent_path();
  if (!fs::is_directory(dir)) fail_in(folder, "not a directory with a config.json");
  const std::string dir_name = dir.string();

  LoadedModel m;
  m.source = folder;
  m.name = dir.filename().string();
  const fs::path config_path = dir / "config.json";
  m.config = parse_hf_config(read_text_file(config_path), config_path.string());

  // Weights: one file, or shards listed in the index.
  std::vector<fs::path> shards;
  std::map<std::string, std::string> weight_map;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(dir / "model.safetensors")) {
    shards.push_back(dir / "model.safetensors");
  } else if (fs::exists(index_path)) {
    for (const auto& shard : read_shard_index(index_path, weight_map))
      shards.push_back(dir / shard);
  } else {
    fail_in(dir_name,
            "no model.safetensors or model.safetensors.index.json (PyTorch .bin checkpoints are "
            "not supported)");
  }
  m.format = shards.size() == 1
                 ? "Hugging Face safetensors"
                 : fmt::format("Hugging Face safetensors ({} shards)", shards.size());

  auto store = std::make_shared<WeightStore>();
  for (const auto& shard_path : shards) {
    const SafetensorsFile st = read_safetensors(shard_path.string());
    const std::string& shard_name = st.name;
    store->add_file(st.file);
    for (const auto& t : st.tensors) {
      if (!weight_map.empty()) {
        const auto listed = weight_map.find(t.name);
        if (listed != weight_map.end() && listed->second != shard_path.filename().string())
          fail_in(shard_name, fmt::format("tensor '{}' is listed in shard {} of the index", t.name,
                                          listed->second));
      }
      const auto gguf_name = hf_to_gguf_tensor_name(t.name);
      if (!gguf_name) {
        if (t.name.ends_with("rotary_emb.inv_freq"))
          continue;  // recomputed, stored by old checkpoints
        fail_in(shard_name, fmt::format("tensor '{}' is not a parameter of the {} architecture",
                                        t.name, m.config.architecture));
      }
      if (*gguf_name == "output.weight" && m.config.tied_embeddings)
        continue;  // tied: the embedding is used
      if (!t.dtype)
        fail_in(
            shard_name,
            fmt::format("tensor '{}' has dtype {}, which specdec does not support (F32, F16, BF16)",
                        t.name, t.dtype_name));
      Tensor w;
      w.name = *gguf_name;
      w.dtype = *t.dtype;
      w.shape = t.shape;
      w.data = t.data;
      w.nbytes = static_cast<std::size_t>(t.nbytes());
      try {
        store->add(std::move(w));
      } catch (const Error& e) {
        fail_in(shard_name, fmt::format("{} (from '{}')", e.what(), t.name));
      }
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto gguf_name = hf_to_gguf_tensor_name(tensor);
    if (gguf_name && !(m.config.tied_embeddings && *gguf_name == "output.weight") &&
        !store->find(*gguf_name))
      fail_in(index_path.string(),
              fmt::format("tensor '{}' is listed in shard {} but not found there", tensor, shard));
  }
  try {
    validate_model_weights(m.config, *store);
  } catch (const Error& e) {
    fail_in(dir_name, e.what());
  }
  m.weights = std::move(store);

  // Tokenizer: tokenizer.json wins over a SentencePiece tokenizer.model (both readers apply the
  // BOS/EOS rules of a tokenizer_config.json beside them).
  const fs::path tokenizer_json = dir / "tokenizer.json";
  const fs::path tokenizer_model = dir / "tokenizer.model";
  std::optional<TokenizerSpec> spec;
  std::string tokenizer_file;
  if (fs::exists(tokenizer_json)) {
    tokenizer_file = tokenizer_json.string();
    spec = read_hf_tokenizer_json(tokenizer_file);
  } else if (fs::exists(tokenizer_model)) {
    tokenizer_file = tokenizer_model.string();
    spec = read_sentencepiece_model(tokenizer_file);
  }
  if (spec) {
    if (spec->tokens.size() > m.config.vocab_size)
      fail_in(tokenizer_file,
              fmt::format("the tokenizer has {} tokens but the model's vocabulary is {}",
                          spec->tokens.size(), m.config.vocab_size));
    try {
      m.tokenizer = make_tokenizer(*spec);
    } catch (const Error& e) {
      fail_in(tokenizer_file, e.what());
    }
    if (m.config.unk_token < 0) m.config.unk_token = spec->unk;
  }
  m.chat_template = read_hf_chat_template(dir);
  return m;
}

}  // namespace specdec
