// llama.cpp's presets (quant_mix.hpp) and `convert_gguf` under them, against what llama.cpp's
// llama_model_quantize wrote (tests/data/model/quant_mix.json, tools/make_kquant_fixtures.py):
//  - the type of every tensor of three models (the trained tinyllama target; a random llama with
//    GQA 4 and 16 layers; a random tied qwen2 with 32-multiple rows and 24 layers) under every
//    preset: the recipe alone, no quantisation;
//  - the bytes of every tensor of the tinyllama target converted to every preset: the recipe,
//    the K-quant and 32-block quantisers and the copy of untouched tensors together.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/quant_mix.hpp"
#include "specdec/model/quants.hpp"
#include "specdec_test.hpp"

using namespace specdec;

namespace {

nlohmann::json fixture() {
  std::ifstream in(std::filesystem::path(SPECDEC_TEST_DATA) / "model" / "quant_mix.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// FNV-1a 64 (the fixture script hashes with the same).
std::string fnv1a64(const std::byte* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint8_t>(p[i])) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

MixModel model_of(const nlohmann::json& m, std::string& arch) {
  arch = m.at("architecture").get<std::string>();
  MixModel model;
  model.architecture = arch;
  model.layers = m.at("layers").get<std::uint32_t>();
  model.heads = m.at("heads").get<std::uint32_t>();
  model.kv_heads = m.at("kv_heads").get<std::uint32_t>();
  model.has_output = false;
  for (const auto& t : m.at("tensors"))
    if (t.at("name") == "output.weight") model.has_output = true;
  return model;
}

}  // namespace

TEST_CASE("presets: names, llama_ftype ids, aliases", "[model][quant_mix]") {
  REQUIRE(find_quant_preset("q4_k_m") != nullptr);
  CHECK(find_quant_preset("Q4_K_M")->file_type == 15);
  CHECK(find_quant_preset("q4_k") == find_quant_preset("Q4_K_M"));
  CHECK(find_quant_preset("Q5_K") == find_quant_preset("Q5_K_M"));
  CHECK(find_quant_preset("Q3_K") == find_quant_preset("Q3_K_M"));
  CHECK(find_quant_preset("q8_0")->base == DType::q8_0);
  CHECK(find_quant_preset("bf16")->file_type == 32);
  CHECK(find_quant_preset("IQ4_XS") == nullptr);
  CHECK(find_quant_preset("Q4_K_X") == nullptr);
  for (const QuantPreset& p : quant_presets()) {
    CHECK(find_quant_preset(p.name) == &p);
    CHECK(quant::can_quantize(p.base));
  }
  CHECK(tensor_layer("blk.17.ffn_down.weight") == 17);
  CHECK(tensor_layer("blk.x.ffn_down.weight") == -1);
  CHECK(tensor_layer("blk.3") == -1);
  CHECK(tensor_layer("output.weight") == -1);
}

TEST_CASE("the recipe gives every tensor llama-quantize's type", "[model][quant_mix]") {
  const nlohmann::json data = fixture();
  for (const auto& m : data.at("models")) {
    std::string arch;
    const MixModel model = model_of(m, arch);
    for (const auto& [preset_name, expected] : m.at("presets").items()) {
      DYNAMIC_SECTION(m.at("name").get<std::string>() << " " << preset_name) {
        const QuantPreset* preset = find_quant_preset(preset_name);
        REQUIRE(preset != nullptr);
        CHECK(preset->file_type == expected.at("file_type").get<std::uint32_t>());
        const auto& tensors = m.at("tensors");
        const auto& types = expected.at("types");
        REQUIRE(types.size() == tensors.size());
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < tensors.size(); ++i) {
          const auto& t = tensors[i];
          const auto shape = t.at("shape").get<std::vector<std::uint64_t>>();
          const auto current = parse_dtype(t.at("type").get<std::string>());
          REQUIRE(current.has_value());
          const std::string name = t.at("name").get<std::string>();
          const MixTensor tensor{name, shape.size(), shape.back(), *current};
          const std::string got = dtype_name(quant_mix_type(*preset, model, tensor));
          if (got != types[i].get<std::string>() && mismatches++ < 5)
            UNSCOPED_INFO(name << ": specdec " << got << ", llama.cpp " << types[i]);
        }
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("convert writes every tensor of the tinyllama target as llama-quantize does",
          "[model][quant_mix]") {
  const auto pair = test::tinyllama_pair();
  if (pair.empty()) {
    WARN("SKIPPED: ../shared/models/tinyllama-pair is not here");
    return;
  }
  const nlohmann::json data = fixture();
  const nlohmann::json* model = nullptr;
  for (const auto& m : data.at("models"))
    if (m.at("name") == "tinyllama-target") model = &m;
  REQUIRE(model != nullptr);
  const auto& tensors = model->at("tensors");
  for (const auto& [preset_name, expected] : model->at("presets").items()) {
    DYNAMIC_SECTION(preset_name) {
      const auto out = std::filesystem::temp_directory_path() /
                       fmt::format("specdec-quant-mix-{}.gguf", preset_name);
      convert_gguf((pair / "target-f32.gguf").string(), out.string(),
                   *find_quant_preset(preset_name));
      const GgufFile g = read_gguf(out.string());
      CHECK(g.get_uint("general.file_type") == expected.at("file_type").get<std::uint64_t>());
      CHECK(g.get_uint("general.quantization_version") == 2u);
      REQUIRE(g.tensors.size() == tensors.size());
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string name = tensors[i].at("name").get<std::string>();
        const GgufTensorInfo* t = g.find_tensor(name);
        REQUIRE(t != nullptr);
        const std::string type = ggml_type_name(t->ggml_type);
        const std::string hash = fnv1a64(t->data, t->nbytes);
        if ((type != expected.at("types")[i] || hash != expected.at("fnv1a64")[i]) &&
            mismatches++ < 5)
          UNSCOPED_INFO(name << ": specdec " << type << " " << hash << ", llama.cpp "
                             << expected.at("types")[i] << " " << expected.at("fnv1a64")[i]);
      }
      std::filesystem::remove(out);
      CHECK(mismatches == 0);
    }
  }
}
