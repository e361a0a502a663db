// The readers against files written by the reference writers (tools/make_model_format_fixtures.py:
// the gguf package, safetensors, transformers' save_pretrained), with the expectations those
// libraries recorded in the .json files beside them.
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model_writers.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/hf.hpp"
#include "specdec/model/safetensors.hpp"
#include "specdec_test.hpp"

using namespace specdec;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path model_data() { return test::test_data() / "model"; }

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string hex(const std::byte* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", static_cast<unsigned>(p[i]));
  return s;
}

GgufType gguf_type_from_name(const std::string& name) {
  static const std::pair<const char*, GgufType> kNames[] = {
      {"uint8", GgufType::uint8},     {"int8", GgufType::int8},     {"uint16", GgufType::uint16},
      {"int16", GgufType::int16},     {"uint32", GgufType::uint32}, {"int32", GgufType::int32},
      {"float32", GgufType::float32}, {"bool", GgufType::boolean},  {"string", GgufType::string},
      {"array", GgufType::array},     {"uint64", GgufType::uint64}, {"int64", GgufType::int64},
      {"float64", GgufType::float64}};
  for (const auto& [n, t] : kNames)
    if (name == n) return t;
  FAIL("unknown type name " << name);
  return GgufType::uint8;
}

// The gguf package types Python values by their first element: str -> string, bool -> bool,
// int -> int32, float -> float32 (nested arrays carry no declared inner type in the .json).
GgufType python_type(const json& v) {
  if (v.is_string()) return GgufType::string;
  if (v.is_boolean()) return GgufType::boolean;
  if (v.is_array()) return GgufType::array;
  if (v.is_number_float()) return GgufType::float32;
  return GgufType::int32;
}

void check_value(const GgufValue& v, const json& expected, GgufType type,
                 std::optional<GgufType> element) {
  CHECK(v.type == type);
  if (type == GgufType::array) {
    const auto* items = v.as_array();
    REQUIRE(items != nullptr);
    REQUIRE(element.has_value());
    CHECK(v.element_type == *element);
    REQUIRE(items->size() == expected.size());
    for (std::size_t i = 0; i < items->size(); ++i) {
      const json& e = expected[i];
      check_value((*items)[i], e, *element,
                  e.is_array() ? std::optional(python_type(e.front())) : std::nullopt);
    }
  } else if (type == GgufType::string) {
    REQUIRE(v.as_string() != nullptr);
    CHECK(*v.as_string() == expected.get<std::string>());
  } else if (type == GgufType::boolean) {
    CHECK(v.as_bool() == expected.get<bool>());
  } else if (type == GgufType::float32) {
    CHECK(v.as_float() == static_cast<double>(expected.get<float>()));
  } else if (type == GgufType::float64) {
    CHECK(v.as_float() == expected.get<double>());
  } else if (expected.is_number_unsigned()) {
    CHECK(v.as_uint() == expected.get<std::uint64_t>());
  } else {
    CHECK(v.as_int() == expected.get<std::int64_t>());
  }
}

void check_types_gguf(const GgufFile& g, const json& expected) {
  CHECK(g.alignment == expected["alignment"].get<std::uint64_t>());
  REQUIRE(g.metadata.size() == expected["metadata"].size());
  for (std::size_t i = 0; i < g.metadata.size(); ++i) {
    const json& e = expected["metadata"][i];
    INFO("metadata key " << e["key"]);
    CHECK(g.metadata[i].first == e["key"].get<std::string>());
    std::optional<GgufType> element;
    if (e.contains("element_type")) element = gguf_type_from_name(e["element_type"]);
    check_value(g.metadata[i].second, e["value"], gguf_type_from_name(e["type"]), element);
  }
  REQUIRE(g.tensors.size() == expected["tensors"].size());
  for (std::size_t i = 0; i < g.tensors.size(); ++i) {
    const json& e = expected["tensors"][i];
    const GgufTensorInfo& t = g.tensors[i];
    INFO("tensor " << e["name"]);
    CHECK(t.name == e["name"].get<std::string>());
    CHECK(t.ggml_type == e["ggml_type"].get<std::uint32_t>());
    CHECK(ggml_type_name(t.ggml_type) == e["type_name"].get<std::string>());
    auto ne = e["ne"].get<std::vector<std::uint64_t>>();
    CHECK(t.shape == std::vector<std::uint64_t>(ne.rbegin(), ne.rend()));
    CHECK(g.data_offset + t.offset == e["data_offset"].get<std::uint64_t>());
    CHECK(t.nbytes == e["n_bytes"].get<std::uint64_t>());
    CHECK(hex(t.data, t.nbytes) == e["hex"].get<std::string>());
  }
}

}  // namespace

TEST_CASE("GGUF: every metadata type and tensor type, as the gguf package wrote them", "[gguf]") {
  const GgufFile g = read_gguf((model_data() / "types.gguf").string());
  CHECK(g.version == 3);
  check_types_gguf(g, read_json(model_data() / "types.gguf.json"));

  // Typed accessors and their errors.
  CHECK(g.get_uint("t.u64") == (std::uint64_t{1} << 40) + 3);
  CHECK(g.get_float("t.f32") == 1.5);
  CHECK(g.get_string("t.string").has_value());
  CHECK_FALSE(g.get_uint("no.such.key").has_value());
  CHECK_THROWS_WITH(g.get_uint("t.i8"), Catch::Contains("types.gguf") && Catch::Contains("t.i8") &&
                                            Catch::Contains("expected a non-negative integer"));
  CHECK_THROWS_WITH(g.get_array("t.array_i32", GgufType::string),
                    Catch::Contains("expected an array of string"));
  CHECK(g.find_tensor("q6_k")->dtype == DType::q6_k);
  CHECK(g.find_tensor("q8_0")->dtype == DType::q8_0);
  CHECK(g.find_tensor("q4_k")->dtype == DType::q4_k);
  CHECK(g.find_tensor("bf16")->dtype == DType::bf16);
  CHECK(describe_gguf_metadata(g).find("t.nested") != std::string::npos);
}

TEST_CASE("GGUF: a version 2 file parses like version 3", "[gguf]") {
  // v2 and v3 differ only in v3's optional big-endian variant; the little-endian layout is the
  // same, so the reference v3 file with its version field set to 2 is a v2 file.
  test::Bytes bytes = test::read_file(model_data() / "types.gguf");
  const std::uint32_t v2 = 2;
  std::memcpy(bytes.data() + 4, &v2, 4);
  const GgufFile g = parse_gguf(bytes, "types-v2.gguf");
  CHECK(g.version == 2);
  check_types_gguf(g, read_json(model_data() / "types.gguf.json"));
}

TEST_CASE("GGUF: tensors point into the memory map (no copy)", "[gguf]") {
  const GgufFile g = read_gguf((model_data() / "types.gguf").string());
  REQUIRE(g.file != nullptr);
  for (const auto& t : g.tensors) {
    CHECK(t.data == g.file->data() + g.data_offset + t.offset);
    CHECK(reinterpret_cast<std::uintptr_t>(t.data) % 64 ==
          0);  // general.alignment = 64, page-aligned map
  }
}

TEST_CASE("safetensors: every dtype, as the safetensors package wrote them", "[safetensors]") {
  const json expected = read_json(model_data() / "types.safetensors.json");
  const SafetensorsFile st = read_safetensors((model_data() / "types.safetensors").string());
  CHECK(st.header_size == expected["header_size"].get<std::uint64_t>());
  CHECK(st.metadata == expected["metadata"].get<std::map<std::string, std::string>>());
  REQUIRE(st.tensors.size() == expected["tensors"].size());
  for (const json& e : expected["tensors"]) {
    INFO("tensor " << e["name"]);
    const SafetensorsTensor* t = st.find(e["name"].get<std::string>());
    REQUIRE(t != nullptr);
    CHECK(t->dtype_name == e["dtype"].get<std::string>());
    CHECK(t->shape == e["shape"].get<std::vector<std::uint64_t>>());
    CHECK(t->begin == e["data_offsets"][0].get<std::uint64_t>());
    CHECK(t->end == e["data_offsets"][1].get<std::uint64_t>());
    CHECK(hex(t->data, t->nbytes()) == e["hex"].get<std::string>());
    CHECK(t->data == st.file->data() + 8 + st.header_size + t->begin);
  }
  CHECK(st.find("a.f32")->dtype == DType::f32);
  CHECK(st.find("b.f16")->dtype == DType::f16);
  CHECK(st.find("c.bf16")->dtype == DType::bf16);
  CHECK_FALSE(st.find("d.i64")->dtype.has_value());
}

namespace {

void check_same_weights(const WeightStore& a, const WeightStore& b) {
  REQUIRE(a.tensors().size() == b.tensors().size());
  for (const auto& [name, t] : a.tensors()) {
    INFO("tensor " << name);
    const Tensor* u = b.find(name);
    REQUIRE(u != nullptr);
    CHECK(t.dtype == u->dtype);
    CHECK(t.shape == u->shape);
    REQUIRE(t.nbytes == u->nbytes);
    CHECK(std::memcmp(t.data, u->data, t.nbytes) == 0);
  }
}

void check_same_config(const ModelConfig& a, const ModelConfig& b) {
  CHECK(a.architecture == b.architecture);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.dim == b.dim);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.ffn_dim == b.ffn_dim);
  CHECK(a.context_length == b.context_length);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope_scaling.kind == b.rope_scaling.kind);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.rope_freq_factors == b.rope_freq_factors);
  CHECK(a.bos_token == b.bos_token);
  CHECK(a.eos_token == b.eos_token);
}

/// The fields of a transformers config.json (read independently of specdec's parser).
void check_config_matches_json(const ModelConfig& c, const json& j) {
  CHECK(c.vocab_size == j["vocab_size"].get<std::size_t>());
  CHECK(c.dim == j["hidden_size"].get<std::size_t>());
  CHECK(c.ffn_dim == j["intermediate_size"].get<std::size_t>());
  CHECK(c.n_layers == j["num_hidden_layers"].get<std::size_t>());
  CHECK(c.n_heads == j["num_attention_heads"].get<std::size_t>());
  CHECK(c.n_kv_heads == j["num_key_value_heads"].get<std::size_t>());
  if (j.contains("head_dim")) CHECK(c.head_dim == j["head_dim"].get<std::size_t>());
  CHECK(c.context_length == j["max_position_embeddings"].get<std::size_t>());
  CHECK(c.rms_norm_eps == j["rms_norm_eps"].get<float>());
  CHECK(c.rope_theta == j["rope_parameters"]["rope_theta"].get<float>());
  CHECK(c.tied_embeddings == j["tie_word_embeddings"].get<bool>());
  CHECK(c.bos_token == j["bos_token_id"].get<token_t>());
  CHECK(c.eos_token == j["eos_token_id"].get<token_t>());
  CHECK(c.rope_layout == RopeLayout::rotate_half);
}

}  // namespace

TEST_CASE("Qwen2: sharded transformers checkpoint and GGUF agree", "[hf][gguf]") {
  const LoadedModel hf = load_hf_model((model_data() / "tiny-qwen2-hf").string());
  const LoadedModel gg = load_gguf_model(read_gguf((model_data() / "tiny-qwen2.gguf").string()));
  check_config_matches_json(hf.config, read_json(model_data() / "tiny-qwen2-hf" / "config.json"));
  CHECK(hf.format == "Hugging Face safetensors (5 shards)");
  CHECK(hf.weights->files().size() == 5);
  CHECK(hf.config.architecture == "qwen2");
  CHECK(hf.config.qkv_bias);
  CHECK(hf.config.tied_embeddings);
  CHECK(hf.weights->find("output.weight") == nullptr);
  CHECK(hf.tokenizer == nullptr);
  // The index file itself also names the folder.
  CHECK(load_model((model_data() / "tiny-qwen2-hf" / "model.safetensors.index.json").string())
            .format == hf.format);
  check_same_config(gg.config, hf.config);
  CHECK(gg.config.rope_layout == RopeLayout::rotate_half);  // llama.cpp's NEOX rope for qwen2
  check_same_weights(*gg.weights, *hf.weights);
}

TEST_CASE("Qwen3: head_dim != hidden/heads and q/k norms, checkpoint and GGUF agree",
          "[hf][gguf]") {
  const LoadedModel hf = load_hf_model((model_data() / "tiny-qwen3-hf").string());
  const LoadedModel gg = load_gguf_model(read_gguf((model_data() / "tiny-qwen3.gguf").string()));
  check_config_matches_json(hf.config, read_json(model_data() / "tiny-qwen3-hf" / "config.json"));
  CHECK(hf.config.qk_norm);
  CHECK_FALSE(hf.config.qkv_bias);
  CHECK(hf.config.q_dim() == 24);  // 2 heads x 12, while hidden_size is 16
  CHECK(hf.weights->get("blk.1.attn_q.weight").shape == std::vector<std::uint64_t>{24, 16});
  CHECK(hf.weights->get("blk.1.attn_output.weight").shape == std::vector<std::uint64_t>{16, 24});
  check_same_config(gg.config, hf.config);
  check_same_weights(*gg.weights, *hf.weights);
}

TEST_CASE("Llama: bfloat16 checkpoint with llama3 rope scaling (transformers 5 rope_parameters)",
          "[hf]") {
  const fs::path dir = model_data() / "tiny-llama3-hf";
  const json j = read_json(dir / "config.json");
  const LoadedModel m = load_model(dir.string());
  check_config_matches_json(m.config, j);
  const json& rope = j["rope_parameters"];
  CHECK(m.config.rope_scaling.kind == RopeScaling::Kind::llama3);
  CHECK(m.config.rope_scaling.factor == rope["factor"].get<float>());
  CHECK(m.config.rope_scaling.low_freq_factor == rope["low_freq_factor"].get<float>());
  CHECK(m.config.rope_scaling.high_freq_factor == rope["high_freq_factor"].get<float>());
  CHECK(m.config.rope_scaling.original_context_length ==
        rope["original_max_position_embeddings"].get<std::size_t>());
  for (const auto& [name, t] : m.weights->tensors()) CHECK(t.dtype == DType::bf16);
  // Loading through config.json or the .safetensors file finds the same folder.
  CHECK(load_model((dir / "config.json").string()).weights->tensors().size() ==
        m.weights->tensors().size());
  CHECK(load_model((dir / "model.safetensors").string()).config.dim == m.config.dim);
}

TEST_CASE("Llama GGUF with Q8_0 matrices and linear rope scaling", "[gguf]") {
  const GgufFile g = read_gguf((model_data() / "tiny-llama-q8_0.gguf").string());
  const LoadedModel m = load_gguf_model(g);
  CHECK(m.config.architecture == "llama");
  CHECK(m.config.rope_layout == RopeLayout::adjacent_pairs);
  CHECK(m.config.rope_scaling.kind == RopeScaling::Kind::linear);
  CHECK(m.config.rope_scaling.factor == 2.0f);
  CHECK(m.config.vocab_size == 32);  // no tokenizer, no vocab_size key: token_embd rows
  CHECK(m.tokenizer == nullptr);
  CHECK(m.name == "tiny-llama-q8_0");
  const Tensor& q = m.weights->get("blk.0.attn_q.weight");
  CHECK(q.dtype == DType::q8_0);
  CHECK(q.shape == std::vector<std::uint64_t>{32, 32});
  CHECK(q.nbytes == 32 * (32 / 32) * 34);
  CHECK(m.weights->get("blk.0.attn_norm.weight").dtype == DType::f32);
  const std::string report = describe_model(m);
  CHECK(report.find("blk.1.ffn_down.weight") != std::string::npos);
  CHECK(report.find("Q8_0") != std::string::npos);
  CHECK(report.find("linear, factor 2") != std::string::npos);
}
