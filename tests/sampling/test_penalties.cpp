// Logit bias and repetition penalties (sampling/penalties.hpp): conformance with llama.cpp's own
// samplers, the window, bans, and the errors.
#include <cmath>
#include <cstddef>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::Error;
using specdec::token_t;
namespace sp = specdec::sampling;

// tests/data/sampling/llama_penalties.json is made by tools/make_llama_penalty_fixtures.cpp with
// llama.cpp 3f545be's llama_sampler_init_logit_bias and llama_sampler_init_penalties in one
// chain, every context token accepted first. llama.cpp leaves a banned token at -inf (null in
// the fixture); specdec at kBannedLogit, whose weight is exactly 0 as well.
TEST_CASE("penalties and logit bias match llama.cpp's samplers", "[penalties]") {
  std::ifstream file(specdec::test::test_data() / "sampling" / "llama_penalties.json");
  REQUIRE(file.good());
  const auto doc = nlohmann::json::parse(file);
  REQUIRE(doc.at("cases").size() >= 80);
  std::size_t changed = 0;
  for (const auto& c : doc.at("cases")) {
    INFO(c.at("name").get<std::string>());
    sp::Penalties p;
    p.repeat = c.at("repeat");
    p.last_n = c.at("last_n");
    p.frequency = c.at("frequency");
    p.presence = c.at("presence");
    for (const auto& b : c.at("logit_bias"))
      p.logit_bias.push_back({b.at(0).get<token_t>(), b.at(1).is_null()
                                                          ? -std::numeric_limits<float>::infinity()
                                                          : b.at(1).get<float>()});
    const auto context = c.at("context").get<std::vector<token_t>>();
    const auto logits = c.at("logits").get<std::vector<float>>();
    sp::validate(p, logits.size());
    const std::vector<float> got = sp::apply_penalties(p, context, logits);
    const auto& out = c.at("out");
    REQUIRE(out.size() == got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("token " << i);
      if (out[i].is_null()) {
        CHECK(got[i] == sp::kBannedLogit);
      } else {
        // llama.cpp's `logit -= count * frequency + presence` may be contracted into an FMA by
        // its -march=native build: one rounding apart at most.
        const float want = out[i].get<float>();
        CHECK(std::fabs(got[i] - want) <=
              4 * std::numeric_limits<float>::epsilon() * std::max(1.0f, std::fabs(want)));
      }
      changed += got[i] != logits[i];
    }
  }
  CHECK(changed > 300);  // the fixture exercises the penalties, not only identities
}

TEST_CASE("the window is the last last_n tokens of the context", "[penalties]") {
  const std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f};
  sp::Penalties p;
  p.repeat = 2.0f;
  p.last_n = 2;
  // Token 0 left the window; 2 and 3 are in it.
  const std::vector<token_t> context = {0, 0, 2, 3};
  CHECK(sp::apply_penalties(p, context, logits) == std::vector<float>{1.0f, 2.0f, -2.0f, 0.25f});
  p.last_n = -1;  // the whole context
  CHECK(sp::apply_penalties(p, context, logits) == std::vector<float>{0.5f, 2.0f, -2.0f, 0.25f});
  p.last_n = 0;  // off
  CHECK(sp::apply_penalties(p, context, logits) == logits);
  // Frequency counts occurrences, presence once.
  p = sp::Penalties{};
  p.last_n = -1;
  p.frequency = 0.5f;
  p.presence = 0.25f;
  CHECK(sp::apply_penalties(p, context, logits) ==
        std::vector<float>{1.0f - 1.0f - 0.25f, 2.0f, -1.75f, -0.25f});
}

TEST_CASE("a banned token has probability 0 under every processing", "[penalties]") {
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  sp::Penalties p;
  p.logit_bias = {{0, -std::numeric_limits<float>::infinity()}};
  p.repeat = 1.5f;
  const std::vector<token_t> context = {0, 0, 1};  // a banned token in the window stays banned
  const std::vector<float> row = sp::apply_penalties(p, context, logits);
  CHECK(row[0] == sp::kBannedLogit);
  for (const sp::SamplingParams& params :
       {sp::SamplingParams{}, sp::SamplingParams{.temperature = 0.3f},
        sp::SamplingParams{.temperature = 0.0f}, sp::SamplingParams{.top_k = 4},
        sp::SamplingParams{.temperature = 0.5f, .top_p = 0.99f, .min_p = 0.01f},
        sp::SamplingParams{.temperature = 2.0f, .top_k = 4, .temperature_last = true}}) {
    CHECK(sp::process_logits<float>(row, params)[0] == 0.0f);
    CHECK(sp::process_logits<double>(row, params)[0] == 0.0);
  }
}

TEST_CASE("bad penalties are refused naming the field", "[penalties]") {
  const auto refused = [](auto&& change, const std::string& what) {
    sp::Penalties p;
    change(p);
    CHECK_THROWS_AS(sp::validate(p, 10), Error);
    CHECK_THROWS_WITH(sp::validate(p, 10), Catch::Contains(what));
  };
  refused([](sp::Penalties& p) { p.repeat = 0.0f; }, "repeat penalty must be finite and > 0");
  refused([](sp::Penalties& p) { p.repeat = std::nanf(""); }, "repeat penalty");
  refused([](sp::Penalties& p) { p.last_n = -2; }, "last_n must be >= 0, or -1");
  refused([](sp::Penalties& p) { p.frequency = std::numeric_limits<float>::infinity(); },
          "frequency penalty");
  refused([](sp::Penalties& p) { p.presence = std::nanf(""); }, "presence penalty");
  refused(
      [](sp::Penalties& p) {
        p.logit_bias = {{10, 1.0f}};
      },
      "token 10, outside the vocabulary (10 tokens)");
  refused(
      [](sp::Penalties& p) {
        p.logit_bias = {{-1, 1.0f}};
      },
      "token -1, outside the vocabulary");
  refused(
      [](sp::Penalties& p) {
        p.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
      },
      "finite or -inf");
  sp::Penalties all;
  for (token_t t = 0; t < 10; ++t)
    all.logit_bias.push_back({t, -std::numeric_limits<float>::infinity()});
  CHECK_THROWS_WITH(sp::validate(all, 10), Catch::Contains("bans every token"));
  all.logit_bias.pop_back();
  CHECK_NOTHROW(sp::validate(all, 10));
}

TEST_CASE("a NaN logit of the model is still reported through the penalties", "[penalties]") {
  std::vector<float> logits = {1.0f, std::nanf(""), 0.5f};
  sp::Penalties p;
  p.repeat = 1.2f;
  p.last_n = -1;
  p.logit_bias = {{1, 2.0f}};
  const std::vector<token_t> context = {1, 1};
  const auto row = sp::apply_penalties(p, context, logits);
  CHECK(std::isnan(row[1]));
  CHECK_THROWS_AS(sp::process_logits<float>(row, sp::SamplingParams{}), Error);
}
