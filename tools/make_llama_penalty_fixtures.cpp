// Writes tests/data/sampling/llama_penalties.json: llama.cpp's logit-bias and penalties samplers
// (llama_sampler_init_logit_bias, then llama_sampler_init_penalties, the order of llama.cpp's
// common sampler chain) applied to random float32 logit rows after a random context was
// accepted, for the conformance test of sampling::PenaltyApplier (tests/sampling/
// test_penalties.cpp). For each case it records the context, the parameters and the logits as
// llama.cpp leaves them ("out"; null where llama.cpp left -inf: a banned token).
//
// Build against llama.cpp 3f545be (../shared/baselines/llama.cpp; build.sh, or only its `llama`
// target) and run from the repository root:
//
//   L=~/.cache/specdec-baselines/llama.cpp
//   g++ -std=c++17 -O1 tools/make_llama_penalty_fixtures.cpp -I$L/include -I$L/ggml/include \
//       -L$L/build/bin -lllama -Wl,-rpath,$L/build/bin -o /tmp/make_llama_penalty_fixtures
//   /tmp/make_llama_penalty_fixtures > tests/data/sampling/llama_penalties.json

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "llama.h"

namespace {

struct Params {
  float repeat;
  int last_n;
  float frequency;
  float presence;
};

void print_floats(const char* name, const std::vector<float>& v) {
  std::printf("   \"%s\": [", name);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isinf(v[i])) {
      std::printf("%snull", i ? ", " : "");
    } else {
      std::printf("%s%.9g", i ? ", " : "", v[i]);
    }
  }
  std::printf("]");
}

}  // namespace

int main() {
  std::mt19937_64 gen(20261127);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::vector<Params> params = {
      {1.1f, 64, 0.0f, 0.0f},                            // a common --repeat-penalty
      {1.5f, 8, 0.0f, 0.0f},  {0.8f, 16, 0.0f, 0.0f},    // < 1 favours repeats
      {1.0f, 64, 0.5f, 0.0f}, {1.0f, 64, 0.0f, 1.2f},    // OpenAI-style penalties
      {1.3f, 4, 0.25f, 0.6f}, {1.0f, 32, -0.4f, -0.3f},  // negative: encourage repeats
      {1.2f, 0, 0.3f, 0.3f},                             // last_n 0: penalties off (the bias stays)
      {1.0f, 64, 0.0f, 0.0f},                            // penalties off
  };
  const std::vector<std::size_t> vocabs = {8, 50, 300};
  std::printf("{\n \"generator\": \"tools/make_llama_penalty_fixtures.cpp\",\n");
  std::printf(
      " \"reference\": \"llama.cpp 3f545be: llama_sampler_init_logit_bias, then "
      "llama_sampler_init_penalties(n_vocab, last_n, repeat, frequency, presence) in one chain; "
      "every context token accepted, then applied to the row\",\n");
  std::printf(" \"cases\": [\n");
  bool first = true;
  int index = 0;
  for (const std::size_t vocab : vocabs) {
    for (const Params& p : params) {
      for (int variant = 0; variant < 3; ++variant, ++index) {
        std::vector<float> logits(vocab);
        for (float& l : logits) l = normal(gen) * 3.0f;
        logits[1] = 0.0f;  // the <= 0 branch at exactly 0
        // A context of repeated tokens from a small set, longer than last_n in some cases.
        const std::size_t length = std::size_t(variant == 0 ? 3 : variant == 1 ? 20 : 90);
        std::uniform_int_distribution<int> token(0, int(std::min<std::size_t>(vocab, 12)) - 1);
        std::vector<llama_token> context(length);
        for (llama_token& t : context) t = token(gen);
        // Logit bias: none, a few finite ones (one token twice), or a ban.
        std::vector<llama_logit_bias> bias;
        if (variant >= 1) {
          bias.push_back({2, 1.5f});
          bias.push_back({3, -2.25f});
          bias.push_back({2, 0.5f});
        }
        if (variant == 2) bias.push_back({0, -INFINITY});
        llama_sampler* chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        if (!bias.empty())
          llama_sampler_chain_add(
              chain, llama_sampler_init_logit_bias(int(vocab), int(bias.size()), bias.data()));
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(int(vocab), p.last_n, p.repeat,
                                                                    p.frequency, p.presence));
        for (const llama_token t : context) llama_sampler_accept(chain, t);
        std::vector<llama_token_data> data(vocab);
        for (std::size_t i = 0; i < vocab; ++i) data[i] = {int(i), logits[i], 0.0f};
        llama_token_data_array cur = {data.data(), vocab, -1, false};
        llama_sampler_apply(chain, &cur);
        llama_sampler_free(chain);
        std::vector<float> out(vocab);
        for (std::size_t i = 0; i < cur.size; ++i)
          out[std::size_t(cur.data[i].id)] = cur.data[i].logit;

        std::printf("%s  {\n   \"name\": \"case%d_V%zu_r%g_n%d_f%g_p%g\",\n", first ? "" : ",\n",
                    index, vocab, p.repeat, p.last_n, p.frequency, p.presence);
        first = false;
        std::printf(
            "   \"repeat\": %.9g, \"last_n\": %d, \"frequency\": %.9g, \"presence\": %.9g,\n",
            p.repeat, p.last_n, p.frequency, p.presence);
        std::printf("   \"context\": [");
        for (std::size_t i = 0; i < context.size(); ++i)
          std::printf("%s%d", i ? ", " : "", context[i]);
        std::printf("],\n   \"logit_bias\": [");
        for (std::size_t i = 0; i < bias.size(); ++i) {
          if (std::isinf(bias[i].bias)) {
            std::printf("%s[%d, null]", i ? ", " : "", bias[i].token);
          } else {
            std::printf("%s[%d, %.9g]", i ? ", " : "", bias[i].token, bias[i].bias);
          }
        }
        std::printf("],\n");
        print_floats("logits", logits);
        std::printf(",\n");
        print_floats("out", out);
        std::printf("\n  }");
      }
    }
  }
  std::printf("\n ]\n}\n");
  return 0;
}
