// The Llama-family tensor table (specdec/model/llama_schema.hpp) against llama.cpp's conversion
// tables: tests/data/model/llama_schema.json, written by tools/make_schema_fixtures.py from the
// gguf-py of llama.cpp 3f545be (the GGUF names each architecture declares, and the GGUF name
// convert_hf_to_gguf.py gives every tensor of three transformers-written checkpoints).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "specdec/model/hf.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec_test.hpp"

using namespace specdec;

namespace {

nlohmann::json fixture() {
  std::ifstream in(std::filesystem::path(SPECDEC_TEST_DATA) / "model" / "llama_schema.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// "blk.{bid}.attn_q" for a row, as gguf-py's TENSOR_NAMES spells it (no .weight / .bias).
std::string gguf_py_name(const LlamaTensorSpec& spec) {
  std::string base(spec.gguf.substr(0, spec.gguf.rfind('.')));
  return spec.per_layer ? "blk.{bid}." + base : base;
}

}  // namespace

TEST_CASE("every Hugging Face tensor gets the GGUF name llama.cpp's converter gives it",
          "[model][schema]") {
  const nlohmann::json data = fixture();
  std::set<LlamaTensor> covered;
  for (const auto& arch : data.at("architectures")) {
    for (const auto& [hf, expected] : arch.at("hf_to_gguf").items()) {
      INFO(arch.at("checkpoint").get<std::string>() << ": " << hf);
      REQUIRE(expected.is_string());
      const auto named = parse_hf_tensor_name(hf);
      REQUIRE(named.has_value());
      CHECK(gguf_tensor_name(named->spec->id, named->layer) == expected.get<std::string>());
      CHECK(hf_to_gguf_tensor_name(hf) == expected.get<std::string>());
      covered.insert(named->spec->id);
    }
  }
  // Every row with a Hugging Face name was checked by at least one checkpoint.
  for (const LlamaTensorSpec& spec : kLlamaTensors)
    if (!spec.hf.empty()) CHECK(covered.count(spec.id) == 1);
}

TEST_CASE("every GGUF name of the table is one llama.cpp declares for the architecture",
          "[model][schema]") {
  const nlohmann::json data = fixture();
  std::map<std::string, std::set<std::string>> declared;  // architecture -> gguf-py names
  for (const auto& arch : data.at("architectures"))
    for (const auto& name : arch.at("gguf_tensors"))
      declared[arch.at("architecture").get<std::string>()].insert(name.get<std::string>());
  for (const LlamaTensorSpec& spec : kLlamaTensors) {
    INFO(spec.gguf);
    const std::string name = gguf_py_name(spec);
    // The flag-dependent tensors belong to the architecture that introduced them; the others
    // to all three.
    if (spec.presence == Presence::qk_norm) {
      CHECK(declared["qwen3"].count(name) == 1);
      CHECK(declared["qwen2"].count(name) == 0);
    } else {
      for (const char* arch : {"llama", "qwen2", "qwen3"}) CHECK(declared[arch].count(name) == 1);
    }
  }
}

TEST_CASE("GGUF and Hugging Face names parse back to their row and layer", "[model][schema]") {
  for (const LlamaTensorSpec& spec : kLlamaTensors) {
    for (const std::size_t layer : {0u, 7u, 123u}) {
      const std::string name = gguf_tensor_name(spec.id, layer);
      INFO(name);
      CHECK(name.starts_with(spec.per_layer ? "blk." + std::to_string(layer) + "." : ""));
      const auto named = parse_gguf_tensor_name(name);
      REQUIRE(named.has_value());
      CHECK(named->spec == &spec);
      CHECK(named->layer == (spec.per_layer ? layer : 0));
      if (spec.hf.empty()) continue;
      const std::string hf =
          spec.per_layer ? "model.layers." + std::to_string(layer) + "." + std::string(spec.hf)
                         : std::string(spec.hf);
      const auto from_hf = parse_hf_tensor_name(hf);
      REQUIRE(from_hf.has_value());
      CHECK(from_hf->spec == &spec);
      CHECK(from_hf->layer == named->layer);
    }
  }
  for (const char* bad :
       {"blk.01.attn_q.weight", "blk.3", "blk.3.", "blk..attn_q.weight", "blk.-1.attn_q.weight",
        "blk.3.attn_q", "blk.3.token_embd.weight", "attn_q.weight", "output.bias", "",
        "blk.99999999999999999999999.attn_q.weight", "blk.3.attn_q.weight.x"}) {
    INFO(bad);
    CHECK_FALSE(parse_gguf_tensor_name(bad).has_value());
  }
  for (const char* bad :
       {"model.layers.1.self_attn.rotary_emb.inv_freq", "model.layers.01.mlp.up_proj.weight",
        "model.layers.1.input_layernorm.weight.x", "model.embed_tokens", "lm_head.bias",
        "model.layers.1.lm_head.weight", ""}) {
    INFO(bad);
    CHECK_FALSE(parse_hf_tensor_name(bad).has_value());
  }
}

TEST_CASE("shapes and presence follow the config", "[model][schema]") {
  ModelConfig c;
  c.architecture = "qwen3";
  c.vocab_size = 100;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 12;  // != dim / heads, as Qwen3 allows
  c.ffn_dim = 48;
  using enum LlamaTensor;
  using Shape = std::vector<std::uint64_t>;
  CHECK(expected_shape(llama_tensor(token_embd), c) == Shape{100, 32});
  CHECK(expected_shape(llama_tensor(attn_q), c) == Shape{48, 32});
  CHECK(expected_shape(llama_tensor(attn_k), c) == Shape{24, 32});
  CHECK(expected_shape(llama_tensor(attn_output), c) == Shape{32, 48});
  CHECK(expected_shape(llama_tensor(ffn_down), c) == Shape{32, 48});
  CHECK(expected_shape(llama_tensor(ffn_up), c) == Shape{48, 32});
  CHECK(expected_shape(llama_tensor(attn_v_bias), c) == Shape{24});
  CHECK(expected_shape(llama_tensor(attn_k_norm), c) == Shape{12});
  CHECK(expected_shape(llama_tensor(rope_freqs), c) == Shape{6});
  CHECK(expected_shape(llama_tensor(output_norm), c) == Shape{32});
  // Vectors are the tensors read as floats: norms, biases, rope factors.
  for (const LlamaTensorSpec& spec : kLlamaTensors) {
    const bool read_as_floats = spec.gguf.ends_with(".bias") ||
                                spec.gguf.find("norm") != std::string_view::npos ||
                                spec.id == rope_freqs;
    CHECK(spec.is_matrix() == !read_as_floats);
  }

  const auto present = [&] {
    std::set<LlamaTensor> out;
    for (const LlamaTensorSpec& spec : kLlamaTensors)
      if (is_present(spec, c)) out.insert(spec.id);
    return out;
  };
  CHECK(present().size() == 12);  // 3 global + 9 per layer
  c.tied_embeddings = true;
  CHECK(present().count(output) == 0);
  c.qkv_bias = true;
  CHECK(present().count(attn_v_bias) == 1);
  c.qk_norm = true;
  CHECK(present().count(attn_q_norm) == 1);
  c.rope_freq_factors = true;
  CHECK(present().size() == 17);
}
