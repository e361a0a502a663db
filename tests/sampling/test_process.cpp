// Logit processing: against Hugging Face transformers' warpers (fixtures), against a plain
// full-sort reference on random inputs, greedy, temperature -> 0, and invalid input.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling_test_util.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

using specdec::Error;
using specdec::sampling::process_logits;
using specdec::sampling::SamplingParams;

namespace {

/// The reference written the plain way: normalised probabilities after each step, full sorts.
std::vector<double> reference_process(const std::vector<float>& logits, const SamplingParams& sp) {
  const std::size_t n = logits.size();
  std::vector<double> out(n, 0.0);
  if (sp.temperature <= 0) {
    out[static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())] =
        1.0;
    return out;
  }
  std::vector<double> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = double(logits[i]) / double(sp.temperature);
  std::vector<bool> keep(n, true);
  if (sp.top_k > 0 && static_cast<std::size_t>(sp.top_k) < n) {
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (std::size_t i = 0; i < n; ++i) keep[i] = s[i] >= sorted[sp.top_k - 1];
  }
  const auto normalise = [&] {
    double max_s = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      if (keep[i]) max_s = std::max(max_s, s[i]);
    }
    double total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = keep[i] ? std::exp(s[i] - max_s) : 0.0;
      total += out[i];
    }
    for (double& x : out) x /= total;
  };
  normalise();
  if (sp.top_p < 1.0f) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return out[a] > out[b]; });
    double before = 0;
    for (const std::size_t i : order) {
      if (before < double(sp.top_p)) {
        before += out[i];
      } else {
        keep[i] = false;
      }
    }
    normalise();
  }
  if (sp.min_p > 0.0f) {
    const double top = *std::max_element(out.begin(), out.end());
    for (std::size_t i = 0; i < n; ++i) {
      if (out[i] < double(sp.min_p) * top) keep[i] = false;
    }
    normalise();
  }
  return out;
}

template <class Real>
void require_close(const std::vector<Real>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
    // Same support exactly (a filter decision is never a rounding matter in these inputs) ...
    REQUIRE((got[i] > 0) == (want[i] > 0));
    // ... and the same probabilities.
    REQUIRE(std::fabs(double(got[i]) - want[i]) <= tol);
  }
}

}  // namespace

// tests/data/sampling/hf_logit_processing.json is made by tools/gen_sampling_fixtures.py with
// transformers' TemperatureLogitsWarper -> TopKLogitsWarper -> TopPLogitsWarper ->
// MinPLogitsWarper and a float64 softmax, for the same float32 logits and float parameters.
TEST_CASE("process_logits matches Hugging Face transformers' warpers", "[process]") {
  std::ifstream file(specdec::test::test_data() / "sampling" / "hf_logit_processing.json");
  REQUIRE(file.good());
  const auto doc = nlohmann::json::parse(file);
  REQUIRE(doc.at("cases").size() >= 10);
  for (const auto& c : doc.at("cases")) {
    SECTION(c.at("name").get<std::string>()) {
      SamplingParams sp;
      sp.temperature = c.at("temperature").get<float>();
      sp.top_k = c.at("top_k").get<int>();
      sp.top_p = c.at("top_p").get<float>();
      sp.min_p = c.at("min_p").get<float>();
      const auto logits = c.at("logits").get<std::vector<float>>();
      const auto want = c.at("probs").get<std::vector<double>>();
      require_close(process_logits<double>(logits, sp), want, 1e-12);
      require_close(process_logits<float>(logits, sp), want, 2e-6);
    }
  }
}

TEST_CASE("process_logits matches a plain full-sort reference on random inputs", "[process]") {
  std::mt19937_64 gen(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 1200; ++trial) {
    const std::size_t vocab = std::vector<std::size_t>{1, 2, 3, 7, 50, 600}[trial % 6];
    const float scale = std::vector<float>{0.5f, 2.0f, 6.0f}[(trial / 6) % 3];
    std::vector<float> logits(vocab);
    for (float& l : logits) l = normal(gen) * scale;
    SamplingParams sp;
    sp.temperature = std::vector<float>{1.0f, 0.6f, 1.7f, 0.05f}[trial % 4];
    sp.top_k = std::vector<int>{0, 1, 3, 40, 1000}[trial % 5];
    sp.top_p = std::vector<float>{1.0f, 0.95f, 0.5f, 0.01f, 0.8f, 1.0f, 0.3f}[trial % 7];
    sp.min_p = std::vector<float>{0.0f, 0.05f, 0.3f, 0.0f, 1.0f}[(trial / 5) % 5];
    INFO("trial " << trial << " V=" << vocab << " T=" << sp.temperature << " top_k=" << sp.top_k
                  << " top_p=" << sp.top_p << " min_p=" << sp.min_p);
    const auto want = reference_process(logits, sp);
    require_close(process_logits<double>(logits, sp), want, 1e-12);
  }
}

TEST_CASE("greedy processing is a one-hot at the argmax, lowest index on ties", "[process]") {
  const std::vector<float> logits{0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (const float t : {0.0f, -1.0f}) {
    SamplingParams sp;
    sp.temperature = t;
    sp.top_k = 2;
    sp.top_p = 0.1f;
    sp.min_p = 0.9f;
    CHECK(sp.greedy());
    CHECK(process_logits<double>(logits, sp) == std::vector<double>{0, 1, 0, 0, 0});
  }
  CHECK(specdec::sampling::argmax(std::span<const float>(logits)) == 1);
  CHECK_THROWS_AS(specdec::sampling::argmax(std::span<const float>()), Error);
}

TEST_CASE("temperature -> 0 approaches greedy", "[process]") {
  std::mt19937_64 gen(99);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> logits(40);
    for (float& l : logits) l = normal(gen);
    const std::size_t best = specdec::sampling::argmax(std::span<const float>(logits));
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double gap = double(sorted[0]) - double(sorted[1]);
    if (gap < 1e-3) continue;  // a near tie: the limit is still one-hot but only at tiny T

    double previous = 0;
    for (const float t : {2.0f, 1.0f, 0.5f, 0.1f, 0.02f, 1e-3f, 1e-5f}) {
      SamplingParams sp;
      sp.temperature = t;
      const auto probs = process_logits<double>(logits, sp);
      // P(argmax) grows as T falls, and is within the closed-form bound of 1:
      // 1 - P(argmax) <= (V - 1) exp(-gap / T).
      CHECK(probs[best] >= previous - 1e-15);
      CHECK(1.0 - probs[best] <= 39.0 * std::exp(-gap / t) + 1e-15);
      previous = probs[best];
    }
    SamplingParams tiny;
    tiny.temperature = 1e-6f;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    if (gap > 1e-3) {  // exp(-1e-3 / 1e-6) underflows to exactly 0
      CHECK(process_logits<float>(logits, tiny) == process_logits<float>(logits, greedy));
    }
  }
}

TEST_CASE("process_logits rejects invalid input", "[process][errors]") {
  const std::vector<float> logits{0.1f, 0.2f, 0.3f};
  std::vector<double> probs(3);
  const auto throws_with = [&](const std::vector<float>& l, const SamplingParams& sp,
                               const std::string& text) {
    std::vector<double> out(l.size());
    CHECK_THROWS_WITH(process_logits<double>(l, sp, std::span<double>(out)),
                      Catch::Matchers::Contains(text));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  throws_with({0.1f, nan, 0.3f}, {}, "logits[1] is NaN");
  throws_with({0.1f, 0.2f, inf}, {}, "logits[2] is +inf");
  throws_with({-inf, 0.2f, 0.3f}, {}, "logits[0] is -inf");
  throws_with({}, {}, "empty logits");
  CHECK_THROWS_WITH(process_logits<double>(logits, {}, std::span<double>(probs.data(), 2)),
                    Catch::Matchers::Contains("probs has 2"));

  SamplingParams sp;
  sp.temperature = nan;
  throws_with(logits, sp, "temperature");
  sp.temperature = inf;
  throws_with(logits, sp, "temperature");
  sp = {};
  sp.top_k = -1;
  throws_with(logits, sp, "top_k");
  for (const float bad : {0.0f, -0.5f, 1.5f, nan}) {
    sp = {};
    sp.top_p = bad;
    throws_with(logits, sp, "top_p");
  }
  for (const float bad : {-0.1f, 1.1f, nan}) {
    sp = {};
    sp.min_p = bad;
    throws_with(logits, sp, "min_p");
  }
  // NaN logits are rejected in greedy mode too.
  sp = {};
  sp.temperature = 0;
  throws_with({nan, 1.0f}, sp, "logits[0] is NaN");
}
