// Logit processing: against Hugging Face transformers' warpers (fixtures), against a plain
// full-sort reference on random inputs, greedy, temperature -> 0, and invalid input.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampling_test_util.hpp"
#include "sort_reference_processing.hpp"
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

/// The sampling settings of a fixture case (temperature, top_k, top_p, min_p).
SamplingParams params_of(const nlohmann::json& c) {
  SamplingParams sp;
  sp.temperature = c.at("temperature").get<float>();
  sp.top_k = c.at("top_k").get<int>();
  sp.top_p = c.at("top_p").get<float>();
  sp.min_p = c.at("min_p").get<float>();
  return sp;
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
      const SamplingParams sp = params_of(c);
      const auto logits = c.at("logits").get<std::vector<float>>();
      const auto want = c.at("probs").get<std::vector<double>>();
      require_close(process_logits<double>(logits, sp), want, 1e-12);
      require_close(process_logits<float>(logits, sp), want, 2e-6);
    }
  }
}

// tests/data/sampling/llama_logit_processing.json is made by
// tools/make_llama_sampling_fixtures.cpp with llama.cpp 3f545be's sampler chain top-k -> top-p
// -> min-p -> temperature: the tokens it keeps and the softmax (float64) of their tempered
// logits, for the same float32 logits and float parameters.
TEST_CASE("process_logits with temperature_last matches llama.cpp's sampler chain", "[process]") {
  std::ifstream file(specdec::test::test_data() / "sampling" / "llama_logit_processing.json");
  REQUIRE(file.good());
  const auto doc = nlohmann::json::parse(file);
  REQUIRE(doc.at("cases").size() >= 100);
  for (const auto& c : doc.at("cases")) {
    INFO(c.at("name").get<std::string>());
    SamplingParams sp = params_of(c);
    sp.temperature_last = true;
    const auto logits = c.at("logits").get<std::vector<float>>();
    std::vector<double> want(logits.size(), 0.0);
    for (const auto& kept : c.at("kept")) want.at(kept.at(0).get<std::size_t>()) = kept.at(1);
    for (const bool in_float : {false, true}) {
      std::vector<double> got;
      if (in_float) {
        for (const float x : process_logits<float>(logits, sp)) got.push_back(x);
      } else {
        got = process_logits<double>(logits, sp);
      }
      // The same tokens kept (exactly), the same probabilities up to llama.cpp's float
      // division by T (the fixture's) against specdec's.
      std::size_t kept = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        REQUIRE((got[i] > 0) == (want[i] > 0));
        kept += want[i] > 0;
        REQUIRE(std::fabs(got[i] - want[i]) <= 2e-6);
      }
      CHECK(kept == c.at("kept").size());
    }
  }
}

TEST_CASE("at temperature 1 both orders give the same distribution", "[process]") {
  std::mt19937_64 gen(77);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> logits(std::vector<std::size_t>{3, 40, 700}[trial % 3]);
    for (float& l : logits) l = normal(gen);
    SamplingParams sp;
    sp.top_k = std::vector<int>{0, 5, 40}[trial % 3];
    sp.top_p = std::vector<float>{1.0f, 0.9f, 0.5f, 0.95f}[trial % 4];
    sp.min_p = std::vector<float>{0.0f, 0.05f, 0.2f}[(trial / 4) % 3];
    const auto hf = process_logits<double>(logits, sp);
    sp.temperature_last = true;
    INFO("trial " << trial);
    require_close(process_logits<double>(logits, sp), hf, 1e-12);
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
    // The smallest temperature that is still sampled (below it the row is greedy by definition,
    // next test) already gives the greedy row where the top two logits are apart.
    SamplingParams tiny;
    tiny.temperature = specdec::sampling::kMinTemperature;
    REQUIRE_FALSE(tiny.greedy());
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    if (gap > 2e-3) {  // exp(-2e-3 / 1e-5) underflows to exactly 0 in float
      CHECK(process_logits<float>(logits, tiny) == process_logits<float>(logits, greedy));
    }
  }
}

TEST_CASE("a temperature too small for float arithmetic is greedy, the limit it approaches",
          "[process]") {
  // At 1e-39, logit / T overflowed to infinity and every weight became NaN ("sample_from: probs
  // has a NaN"). Below kMinTemperature the row is the greedy one, whatever the filters say.
  const std::vector<float> logits{0.5f, 3.0f, -2.0f, 3.0f - 2e-4f, 1.0f, -40.0f};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (const float t : {std::numeric_limits<float>::denorm_min(), 1e-39f, 1e-30f, 9.99e-6f}) {
    INFO("temperature " << t);
    for (const bool last : {false, true}) {
      SamplingParams sp;
      sp.temperature = t;
      sp.top_p = 0.5f;
      sp.min_p = 0.1f;
      sp.temperature_last = last;
      CHECK(sp.greedy());
      CHECK(process_logits<float>(logits, sp) == process_logits<float>(logits, greedy));
      CHECK(process_logits<double>(logits, sp) == std::vector<double>{0, 1, 0, 0, 0, 0});
    }
  }
  // From kMinTemperature up the row is sampled: finite probabilities summing to 1, the near-tie
  // at index 3 sharing the mass as exp(-2e-4 / T) says.
  SamplingParams cold;
  cold.temperature = specdec::sampling::kMinTemperature;
  CHECK_FALSE(cold.greedy());
  const auto probs = process_logits<double>(logits, cold);
  for (const double p : probs) CHECK(std::isfinite(p));
  CHECK(probs[1] + probs[3] == Approx(1.0));
  CHECK(probs[3] > 0);
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

// ------------------------------------------------------------------ full vocabulary (Qwen2.5)
//
// At V = 151936 (Qwen2.5's vocabulary) the processing must keep exactly the tokens that the
// sort-based processing keeps (tests/support/sort_reference_processing.hpp, the processing as
// written before the row plans) with the same probabilities up to the exp's rounding, and a
// lazily computed entry must equal the materialised one bit for bit.

namespace {

constexpr std::size_t kQwenVocab = 151936;

/// LM-like logits: a N(0, 2^2) body, `peaks` tokens lifted by 6 ... 16 (a peaked distribution
/// with a long tail), and a few exact ties among the peaks.
std::vector<float> lm_logits(std::uint64_t seed, std::size_t peaks) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> lift(6.0f, 16.0f);
  std::uniform_int_distribution<std::size_t> token(0, kQwenVocab - 1);
  std::vector<float> logits(kQwenVocab);
  for (float& l : logits) l = normal(gen);
  for (std::size_t j = 0; j < peaks; ++j) logits[token(gen)] += lift(gen);
  const std::size_t a = token(gen);
  const std::size_t b = token(gen);
  logits[b] = logits[a];  // a tie somewhere in the body
  return logits;
}

const std::vector<SamplingParams>& large_settings() {
  static const std::vector<SamplingParams> settings = {
      {.temperature = 0.8f},
      {.temperature = 1.0f, .top_k = 40},
      {.temperature = 0.7f, .top_k = 1},
      {.temperature = 1.3f, .top_k = 5000},
      {.temperature = 0.8f, .top_p = 0.95f},
      {.temperature = 1.0f, .top_p = 0.5f},
      {.temperature = 1.5f, .top_p = 0.99f},
      {.temperature = 0.8f, .min_p = 0.05f},
      {.temperature = 1.0f, .top_k = 100, .top_p = 0.9f, .min_p = 0.02f},
  };
  return settings;
}

}  // namespace

TEST_CASE("full-vocabulary rows keep the sort-based reference's tokens", "[process][large]") {
  for (const std::size_t peaks : {0u, 3u, 40u}) {
    const auto logits = lm_logits(1000 + peaks, peaks);
    for (const SamplingParams& sp : large_settings()) {
      INFO("peaks " << peaks << " T " << sp.temperature << " top_k " << sp.top_k << " top_p "
                    << sp.top_p << " min_p " << sp.min_p);
      std::vector<float> want(kQwenVocab);
      specdec::test::sort_reference_process<float>(logits, sp, std::span<float>(want));
      const auto got = process_logits<float>(logits, sp);
      std::size_t kept = 0;
      for (std::size_t i = 0; i < kQwenVocab; ++i) {
        if ((got[i] > 0) != (want[i] > 0)) {
          INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
          REQUIRE((got[i] > 0) == (want[i] > 0));
        }
        kept += got[i] > 0;
        // The polynomial exp is within a few ulp of std::exp: 2e-6 relative covers it and the
        // totals' different summation order.
        if (std::fabs(got[i] - want[i]) > 2e-6f * want[i] + 1e-30f) {
          INFO("token " << i << ": got " << got[i] << ", want " << want[i]);
          REQUIRE(std::fabs(got[i] - want[i]) <= 2e-6f * want[i] + 1e-30f);
        }
      }
      if (sp.top_k > 0 && sp.top_p == 1.0f && sp.min_p == 0.0f)
        CHECK(kept >= static_cast<std::size_t>(sp.top_k));
      // Double rows: std::exp, only the totals' summation order differs.
      std::vector<double> want_d(kQwenVocab);
      specdec::test::sort_reference_process<double>(logits, sp, std::span<double>(want_d));
      const auto got_d = process_logits<double>(logits, sp);
      for (std::size_t i = 0; i < kQwenVocab; ++i) {
        if ((got_d[i] > 0) != (want_d[i] > 0) ||
            std::fabs(got_d[i] - want_d[i]) > 1e-12 * want_d[i]) {
          INFO("double, token " << i << ": got " << got_d[i] << ", want " << want_d[i]);
          REQUIRE((got_d[i] > 0) == (want_d[i] > 0));
          REQUIRE(std::fabs(got_d[i] - want_d[i]) <= 1e-12 * want_d[i]);
        }
      }
    }
  }
}

TEST_CASE("a lazily computed p(x) equals the materialised row bit for bit", "[process][large]") {
  const auto logits = lm_logits(77, 12);
  std::vector<float> work(kQwenVocab);
  for (const SamplingParams& sp : large_settings()) {
    INFO("T " << sp.temperature << " top_k " << sp.top_k << " top_p " << sp.top_p << " min_p "
              << sp.min_p);
    const auto full = process_logits<float>(logits, sp);
    const auto row = specdec::sampling::plan_processing<float>(logits, sp, std::span(work));
    std::size_t differ = 0;
    for (std::size_t i = 0; i < kQwenVocab; ++i) differ += row.prob(i) != full[i];
    CHECK(differ == 0);
  }
  // Small and odd sizes take the scalar tails.
  for (const std::size_t vocab : {1u, 3u, 7u, 9u, 4099u}) {
    std::vector<float> small(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(vocab));
    std::vector<float> small_work(vocab);
    for (const SamplingParams& sp : large_settings()) {
      const auto full = process_logits<float>(small, sp);
      const auto row = specdec::sampling::plan_processing<float>(small, sp, std::span(small_work));
      for (std::size_t i = 0; i < vocab; ++i) REQUIRE(row.prob(i) == full[i]);
    }
  }
}

TEST_CASE("every ISA of the weight pass gives the same bits", "[process][large]") {
  // The weight pass (weight_pass.inc) at 4, 8 and 16 lanes and the scalar weight() entry by
  // entry must produce the same rows, totals and lazy entries bit for bit, on LM-like rows and
  // on rows of extreme values: a restricted draft head (kMaskedLogit, -FLT_MAX, beyond its ids;
  // masked ids sprinkled inside, the masked region starting mid-group), huge logits whose
  // tempered values overflow, and weights in the subnormals. NaN rows are refused before any
  // pass, under every ISA.
  namespace sd = specdec::sampling::detail;
  using sd::PassIsa;
  constexpr float kMasked = std::numeric_limits<float>::lowest();
  std::vector<std::vector<float>> rows;
  rows.push_back(lm_logits(91, 20));
  auto head = lm_logits(92, 20);  // a draft with a restricted head: ids >= 32768 + 5 masked
  for (std::size_t i = 32768 + 5; i < kQwenVocab; ++i) head[i] = kMasked;
  for (std::size_t i = 100; i < 32768; i += 997) head[i] = kMasked;
  rows.push_back(head);
  auto extreme = lm_logits(93, 3);  // groups straddling the exp's underflow, huge magnitudes
  std::mt19937_64 gen(94);
  std::uniform_real_distribution<float> wide(-120.0f, 0.0f);
  for (std::size_t i = 0; i < kQwenVocab; i += 3) extreme[i] = wide(gen);
  for (std::size_t i = 1; i < kQwenVocab; i += 1031) extreme[i] = -3e38f;
  for (std::size_t i = 2; i < kQwenVocab; i += 4093) extreme[i] = 1e-40f;  // subnormal logit
  extreme[kQwenVocab - 1] = 2e37f;  // the maximum: s = 1e38 at T 0.2 (masked ones: -inf)
  extreme[kQwenVocab - 7] = 2e37f - 1e31f;
  rows.push_back(extreme);
  std::vector<SamplingParams> settings = large_settings();
  settings.push_back({.temperature = 0.2f});
  settings.push_back({.temperature = 50.0f});

  std::vector<PassIsa> isas;
  for (const PassIsa isa : {PassIsa::scalar, PassIsa::baseline, PassIsa::avx2, PassIsa::avx512}) {
    if (sd::pass_isa_supported(isa)) {
      isas.push_back(isa);
    } else {
      WARN("this CPU or build cannot run weight-pass ISA " << static_cast<int>(isa));
    }
  }
  struct Restore {
    ~Restore() { sd::set_pass_isa(PassIsa::automatic); }
  } restore;
  std::vector<float> work(kQwenVocab);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (const SamplingParams& sp : settings) {
      INFO("row " << r << " T " << sp.temperature << " top_k " << sp.top_k << " top_p " << sp.top_p
                  << " min_p " << sp.min_p);
      sd::set_pass_isa(PassIsa::scalar);
      const auto want = process_logits<float>(rows[r], sp);
      const double want_total =
          specdec::sampling::plan_processing<float>(rows[r], sp, std::span(work)).total();
      std::size_t nonzero = 0;
      for (const float x : want) nonzero += x > 0;
      CHECK(nonzero > 0);
      for (const PassIsa isa : isas) {
        INFO("ISA " << static_cast<int>(isa));
        sd::set_pass_isa(isa);
        const auto got = process_logits<float>(rows[r], sp);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < kQwenVocab; ++i)
          differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]);
        REQUIRE(differ == 0);
        const auto row = specdec::sampling::plan_processing<float>(rows[r], sp, std::span(work));
        REQUIRE(std::bit_cast<std::uint64_t>(row.total()) ==
                std::bit_cast<std::uint64_t>(want_total));
        for (std::size_t i = 0; i < kQwenVocab; i += 1009) REQUIRE(row.prob(i) == want[i]);
      }
    }
  }
  // The scan: the first maximum (ties across lanes, vectors and groups; a constant row) and the
  // first non-finite entry, whatever the ISA.
  auto ties = rows[0];
  const float top = *std::max_element(ties.begin(), ties.end()) + 1.0f;
  for (const std::size_t at : {131000u, 5003u, 5000u, 151935u}) ties[at] = top;
  const std::vector<float> flat(kQwenVocab, -2.5f);
  auto inf = rows[0];
  inf[150001] = -std::numeric_limits<float>::infinity();
  inf[150007] = std::numeric_limits<float>::infinity();
  for (const PassIsa isa : isas) {
    sd::set_pass_isa(isa);
    CHECK(sd::scan_logits(ties.data(), kQwenVocab).argmax == 5000);
    CHECK(sd::scan_logits(ties.data(), 5002).argmax == 5000);
    CHECK(sd::scan_logits(flat.data(), kQwenVocab).argmax == 0);
    CHECK(sd::scan_logits(inf.data(), kQwenVocab).bad == 150001);
    CHECK(sd::scan_logits(rows[0].data(), 63).bad == 63);  // shorter than a group
  }
  // A NaN anywhere is refused, naming its index, whatever the ISA.
  auto bad = rows[0];
  bad[70001] = std::numeric_limits<float>::quiet_NaN();
  for (const PassIsa isa : isas) {
    sd::set_pass_isa(isa);
    REQUIRE_THROWS_WITH(process_logits<float>(bad, {.temperature = 0.8f}),
                        Catch::Matchers::Contains("logits[70001] is NaN"));
  }
}

TEST_CASE("full-vocabulary argmax: first maximum wins, NaN named by index", "[process][large]") {
  auto logits = lm_logits(5, 0);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  // Ties in different vector lanes, in the vector body and in the scalar tail.
  for (const std::vector<std::size_t>& ties :
       {std::vector<std::size_t>{7, 4099, 151935}, std::vector<std::size_t>{151934, 151935},
        std::vector<std::size_t>{5, 6}, std::vector<std::size_t>{0, 151935},
        std::vector<std::size_t>{100002, 100001}}) {
    auto row = logits;
    for (const std::size_t t : ties) row[t] = 50.0f;
    const std::size_t first = *std::min_element(ties.begin(), ties.end());
    const auto probs = process_logits<float>(row, greedy);
    CHECK(probs[first] == 1.0f);
    CHECK(std::accumulate(probs.begin(), probs.end(), 0.0) == 1.0);
    CHECK(specdec::sampling::detail::scan_logits(row.data(), row.size()).argmax == first);
  }
  for (const std::size_t bad : {3u, 70001u, 151935u}) {
    auto row = logits;
    row[bad] = std::numeric_limits<float>::quiet_NaN();
    row[bad + (bad < 100 ? 10 : 0)] = bad < 100 ? std::numeric_limits<float>::infinity() : row[bad];
    CHECK_THROWS_WITH(process_logits<float>(row, greedy),
                      Catch::Matchers::Contains("logits[" + std::to_string(bad) + "] is NaN"));
    CHECK_THROWS_WITH(process_logits<float>(row, SamplingParams{}),
                      Catch::Matchers::Contains("logits[" + std::to_string(bad) + "] is NaN"));
  }
}

TEST_CASE("top-k at full vocabulary: ties at the boundary, k near V", "[process][large]") {
  // Every logit equal: top-k keeps all (ties at the boundary are kept).
  const std::vector<float> flat(kQwenVocab, 1.5f);
  SamplingParams sp;
  sp.top_k = 40;
  auto probs = process_logits<float>(flat, sp);
  CHECK(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }) ==
        static_cast<std::ptrdiff_t>(kQwenVocab));
  // 1000 tokens share the top value, k = 40: all 1000 are kept.
  std::vector<float> logits = lm_logits(9, 0);
  for (std::size_t i = 0; i < 1000; ++i) logits[i * 151] = 30.0f;
  probs = process_logits<float>(logits, sp);
  CHECK(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }) == 1000);
  for (const int k : {static_cast<int>(kQwenVocab) - 1, 4096, 4097, 2}) {
    sp.top_k = k;
    std::vector<float> want(kQwenVocab);
    specdec::test::sort_reference_process<float>(logits, sp, std::span<float>(want));
    probs = process_logits<float>(logits, sp);
    for (std::size_t i = 0; i < kQwenVocab; ++i) REQUIRE((probs[i] > 0) == (want[i] > 0));
  }
}
