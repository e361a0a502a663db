// Writes tests/data/sampling/llama_logit_processing.json: llama.cpp's default sampler chain
// (top-k -> top-p -> min-p -> temperature, llama_sampler_init_*) applied to random float32 logit
// rows, for the conformance test of SamplingParams::temperature_last (tests/sampling/
// test_process.cpp). For each case it records the tokens llama.cpp keeps and their tempered
// logits as llama.cpp leaves them; the probabilities are their softmax in float64 (llama.cpp's
// dist sampler draws from the same softmax, in float). "kept" lists [id, probability] of the
// kept tokens; every other token has probability 0.
//
// Build against llama.cpp 3f545be (../shared/baselines/llama.cpp; build.sh, or only its `llama`
// target) and run from the repository root:
//
//   L=~/.cache/specdec-baselines/llama.cpp
//   g++ -std=c++17 -O1 tools/make_llama_sampling_fixtures.cpp -I$L/include -I$L/ggml/include \
//       -L$L/build/bin -lllama -Wl,-rpath,$L/build/bin -o /tmp/make_llama_sampling_fixtures
//   /tmp/make_llama_sampling_fixtures > tests/data/sampling/llama_logit_processing.json
//
// Cases whose top-p cut lands within 1e-5 of top_p (where llama.cpp's float cumulative sum and
// specdec's double one may disagree) are left out and counted in "skipped_near_top_p".

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "llama.h"

namespace {

struct Params {
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

/// Whether the top-p walk over `logits` (top-k survivors at temperature 1) ends within `eps`
/// of top_p: then float and double sums may cut at different tokens.
bool near_top_p(std::vector<float> kept_logits, float top_p, double eps) {
  if (top_p >= 1.0f) return false;
  std::sort(kept_logits.begin(), kept_logits.end(), [](float a, float b) { return a > b; });
  double total = 0;
  for (const float l : kept_logits) total += std::exp(double(l) - double(kept_logits[0]));
  double cum = 0;
  for (const float l : kept_logits) {
    cum += std::exp(double(l) - double(kept_logits[0])) / total;
    if (std::fabs(cum - double(top_p)) < eps) return true;
    if (cum >= top_p) return false;
  }
  return false;
}

}  // namespace

int main() {
  std::mt19937_64 gen(20261126);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<Params> params = {
      {0.8f, 40, 0.95f, 0.05f},  // llama.cpp's defaults
      {1.0f, 0, 1.0f, 0.0f},    {0.5f, 0, 1.0f, 0.0f},   {0.7f, 3, 1.0f, 0.0f},
      {1.5f, 0, 0.9f, 0.0f},    {0.6f, 0, 0.5f, 0.0f},   {2.0f, 0, 1.0f, 0.1f},
      {0.3f, 0, 1.0f, 0.3f},    {1.2f, 10, 0.8f, 0.02f}, {0.9f, 40, 0.95f, 0.05f},
  };
  const std::vector<std::size_t> vocabs = {5, 8, 50, 256};
  const std::vector<float> scales = {0.5f, 2.0f, 5.0f};
  std::printf("{\n \"generator\": \"tools/make_llama_sampling_fixtures.cpp\",\n");
  std::printf(
      " \"reference\": \"llama.cpp 3f545be: llama_sampler_init_top_k, _top_p(p, 1), "
      "_min_p(p, 1), _temp, applied in that order; softmax of the kept tempered logits "
      "in float64\",\n");
  std::printf(" \"cases\": [\n");
  int skipped = 0;
  bool first = true;
  for (const std::size_t vocab : vocabs) {
    for (const float scale : scales) {
      for (const Params& p : params) {
        std::vector<float> logits(vocab);
        for (float& l : logits) l = normal(gen) * scale;
        std::vector<llama_token_data> data(vocab);
        for (std::size_t i = 0; i < vocab; ++i) data[i] = {int(i), logits[i], 0.0f};
        llama_token_data_array cur = {data.data(), vocab, -1, false};
        {  // the top-k survivors, to see whether the top-p cut is a near tie
          std::vector<float> sorted = logits;
          std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return a > b; });
          if (p.top_k > 0 && std::size_t(p.top_k) < vocab) sorted.resize(std::size_t(p.top_k));
          if (near_top_p(sorted, p.top_p, 1e-5)) {
            ++skipped;
            continue;
          }
        }
        llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(p.top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(p.top_p, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(p.min_p, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp(p.temperature));
        llama_sampler_apply(chain, &cur);
        llama_sampler_free(chain);
        std::vector<double> probs(vocab, 0.0);
        double max_l = -INFINITY;
        for (std::size_t i = 0; i < cur.size; ++i)
          max_l = std::max(max_l, double(cur.data[i].logit));
        double total = 0;
        for (std::size_t i = 0; i < cur.size; ++i)
          total += std::exp(double(cur.data[i].logit) - max_l);
        for (std::size_t i = 0; i < cur.size; ++i)
          probs[std::size_t(cur.data[i].id)] = std::exp(double(cur.data[i].logit) - max_l) / total;
        std::printf("%s  {\n   \"name\": \"V%zu_scale%g_T%g_k%d_p%g_minp%g\",\n",
                    first ? "" : ",\n", vocab, scale, p.temperature, p.top_k, p.top_p, p.min_p);
        first = false;
        std::printf("   \"temperature\": %.9g, \"top_k\": %d, \"top_p\": %.9g, \"min_p\": %.9g,\n",
                    p.temperature, p.top_k, p.top_p, p.min_p);
        std::printf("   \"logits\": [");
        for (std::size_t i = 0; i < vocab; ++i) std::printf("%s%.9g", i ? ", " : "", logits[i]);
        std::printf("],\n   \"kept\": [");  // [id, probability] of each kept token, by id
        bool any = false;
        for (std::size_t i = 0; i < vocab; ++i) {
          if (probs[i] <= 0) continue;
          std::printf("%s[%zu, %.17g]", any ? ", " : "", i, probs[i]);
          any = true;
        }
        std::printf("]\n  }");
      }
    }
  }
  std::printf("\n ],\n \"skipped_near_top_p\": %d\n}\n", skipped);
  return 0;
}
