// The CPU Transformer against Hugging Face transformers: tiny random-weight LlamaForCausalLM,
// Qwen2ForCausalLM and Qwen3ForCausalLM models and the logits transformers computed for them
// (tests/data/cpu/*/reference.json, written by tools/make_cpu_fixtures.py).
//
// Tolerance: for every position, max_v |ours - theirs| <= 1e-4 * max_v |theirs| (both float32;
// the difference comes from summation orders). Checked on every instruction set this machine
// has, all of which must also agree with each other bit for bit (F32 weights take the fma path,
// whose order is the same on every Isa).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

namespace {

using specdec::token_t;
using specdec::cpu::Isa;

struct Fixture {
  std::vector<token_t> tokens;
  std::vector<std::vector<float>> logits;
};

Fixture read_fixture(const std::filesystem::path& folder) {
  std::ifstream in(folder / "reference.json");
  const auto j = nlohmann::json::parse(in);
  return {j.at("tokens").get<std::vector<token_t>>(),
          j.at("logits").get<std::vector<std::vector<float>>>()};
}

/// max |a - b| / max |b| over one row.
double relative_error(std::span<const float> ours, const std::vector<float>& theirs) {
  double diff = 0, scale = 0;
  for (std::size_t v = 0; v < theirs.size(); ++v) {
    diff = std::max(diff, std::fabs(static_cast<double>(ours[v]) - theirs[v]));
    scale = std::max(scale, std::fabs(static_cast<double>(theirs[v])));
  }
  return diff / scale;
}

struct IsaOverride {
  explicit IsaOverride(Isa isa) { specdec::cpu::set_isa_override(isa); }
  ~IsaOverride() { specdec::cpu::set_isa_override(std::nullopt); }
};

}  // namespace

TEST_CASE("logits match Hugging Face transformers", "[cpu][hf]") {
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    const auto folder = specdec::test::test_data() / "cpu" / name;
    const Fixture fixture = read_fixture(folder);
    const specdec::LoadedModel loaded = specdec::load_model(folder.string());
    REQUIRE(loaded.config.vocab_size == fixture.logits.front().size());

    std::vector<float> first_isa_logits;
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx}) {
      if (!specdec::cpu::isa_supported(isa)) continue;
      INFO(name << " on " << specdec::cpu::isa_name(isa));
      const IsaOverride use(isa);
      specdec::cpu::Transformer model(loaded, {.threads = 2});

      // The whole sequence in one forward call.
      const specdec::LogitsView all = model.forward(fixture.tokens);
      REQUIRE(all.rows == fixture.tokens.size());
      double worst = 0;
      for (std::size_t t = 0; t < all.rows; ++t)
        worst = std::max(worst, relative_error(all.row(t), fixture.logits[t]));
      INFO("worst relative error " << worst);
      CHECK(worst <= 1e-4);
      const std::vector<float> batch(all.data, all.data + all.rows * all.vocab);

      // One token at a time through the KV cache: bitwise the same rows.
      model.reset();
      for (std::size_t t = 0; t < fixture.tokens.size(); ++t) {
        const specdec::LogitsView one = model.forward(std::span(&fixture.tokens[t], 1));
        CHECK(std::memcmp(one.data, batch.data() + t * all.vocab, all.vocab * sizeof(float)) == 0);
      }

      if (first_isa_logits.empty())
        first_isa_logits = batch;
      else
        CHECK(std::memcmp(first_isa_logits.data(), batch.data(), batch.size() * sizeof(float)) ==
              0);
    }
  }
}
