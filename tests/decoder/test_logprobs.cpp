// Log-probabilities of the emitted tokens (GenerationConfig::logprobs): each one is the target's
// processed distribution at that token's position (penalties included; greedy: the softmax of
// the logits), whether the token was an accepted draft, a residual sample or a bonus, and none of
// it comes from the draft.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/sampling/logprobs.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::SpeculativeOptions;
using specdec::token_t;
using specdec::test::Markov;
using specdec::test::MockLM;
namespace sp = specdec::sampling;

namespace {

/// The reference: for each generated token, the target's row after its prefix, penalised and
/// processed in full (process_logits), its log and the top_n most likely tokens by a full sort.
std::vector<sp::TokenLogprob> reference_logprobs(const MockLM& target,
                                                 const std::vector<token_t>& prompt,
                                                 const GenerationConfig& cfg,
                                                 const GenerationResult& result) {
  std::vector<sp::TokenLogprob> out;
  std::vector<token_t> seq = prompt;
  const sp::SamplingParams params = cfg.sampling.greedy() ? sp::SamplingParams{} : cfg.sampling;
  for (const token_t t : result.tokens) {
    const std::vector<float> row = sp::apply_penalties(cfg.penalties, seq, target.logits_of(seq));
    const std::vector<float> p = sp::process_logits<float>(row, params);
    sp::TokenLogprob lp;
    lp.token = t;
    lp.logprob = static_cast<float>(std::log(static_cast<double>(p[static_cast<std::size_t>(t)])));
    std::vector<std::size_t> ids(row.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(),
                     [&](std::size_t a, std::size_t b) { return row[a] > row[b]; });
    for (std::size_t i = 0; i < std::min(cfg.top_logprobs, ids.size()); ++i) {
      if (p[ids[i]] == 0.0f) break;
      lp.top.push_back({static_cast<token_t>(ids[i]),
                        static_cast<float>(std::log(static_cast<double>(p[ids[i]])))});
    }
    out.push_back(lp);
    seq.push_back(t);
  }
  return out;
}

}  // namespace

TEST_CASE("log-probabilities are the target's processed rows at each emitted position",
          "[decoder][logprobs]") {
  const Markov target_table(5);
  const Markov draft_table(6);
  const std::vector<token_t> prompt{0, 1, 1, 3};
  struct Setting {
    std::string name;
    sp::SamplingParams params;
    bool penalties;
  };
  const std::vector<Setting> settings{
      {"greedy", sp::SamplingParams{.temperature = 0.0f}, false},
      {"greedy, penalties", sp::SamplingParams{.temperature = 0.0f}, true},
      {"temperature 0.8, top-k 4 (llama order)",
       sp::SamplingParams{.temperature = 0.8f, .top_k = 4, .temperature_last = true}, false},
      {"temperature 1.2, top-p 0.9, penalties",
       sp::SamplingParams{.temperature = 1.2f, .top_p = 0.9f}, true},
  };
  std::size_t accepted = 0, rejected_rounds = 0, short_tops = 0;
  for (const Setting& setting : settings) {
    for (const std::size_t top_n : {0, 3, 10}) {
      GenerationConfig cfg;
      cfg.max_new_tokens = 30;
      cfg.sampling = setting.params;
      cfg.logprobs = true;
      cfg.top_logprobs = top_n;
      cfg.record_rounds = true;
      if (setting.penalties) {
        cfg.penalties.repeat = 1.4f;
        cfg.penalties.last_n = 4;
        cfg.penalties.presence = 0.3f;
        cfg.penalties.logit_bias = {{5, -std::numeric_limits<float>::infinity()}};
      }
      for (std::uint64_t seed = 0; seed < 4; ++seed) {
        INFO(setting.name << ", top " << top_n << ", seed " << seed);
        cfg.seed = seed;
        const MockLM reference_model = target_table.lm();
        // Speculative with a draft model (accepted drafts, residuals, bonuses), with n-gram
        // proposals (point masses), and target-only: the same rule everywhere.
        MockLM t1 = target_table.lm();
        MockLM d1 = draft_table.lm();
        const GenerationResult spec =
            specdec::SpeculativeDecoder(d1, t1, SpeculativeOptions{.k = 3}).generate(prompt, cfg);
        MockLM t2 = target_table.lm();
        specdec::NGramDrafter ngram;
        const GenerationResult lookup =
            specdec::SpeculativeDecoder(ngram, t2, SpeculativeOptions{.k = 4})
                .generate(prompt, cfg);
        MockLM t3 = target_table.lm();
        const GenerationResult plain = specdec::AutoregressiveDecoder(t3).generate(prompt, cfg);
        for (const GenerationResult* r : {&spec, &lookup, &plain}) {
          REQUIRE(r->logprobs.size() == r->tokens.size());
          CHECK(r->logprobs == reference_logprobs(reference_model, prompt, cfg, *r));
        }
        for (const auto& round : spec.rounds) {
          accepted += round.accepted;
          rejected_rounds += round.accepted < round.drafted.size();
        }
        for (const auto& lp : spec.logprobs) short_tops += lp.top.size() < top_n;
      }
    }
  }
  CHECK(accepted > 100);
  CHECK(rejected_rounds > 50);
  CHECK(short_tops > 0);  // filtered tokens (top-k, the ban) are left out of the alternatives
}

TEST_CASE("without logprobs nothing is reported", "[decoder][logprobs]") {
  const Markov target_table(5);
  MockLM t = target_table.lm();
  GenerationConfig cfg = specdec::test::greedy(8);
  std::size_t events_with = 0;
  specdec::Callbacks callbacks;
  callbacks.on_token = [&](const specdec::TokenEvent& e) { events_with += e.logprob != nullptr; };
  const auto r =
      specdec::AutoregressiveDecoder(t).generate(std::vector<token_t>{1, 2}, cfg, callbacks);
  CHECK(r.logprobs.empty());
  CHECK(events_with == 0);
  cfg.logprobs = true;
  MockLM t2 = target_table.lm();
  std::vector<sp::TokenLogprob> streamed;
  callbacks.on_token = [&](const specdec::TokenEvent& e) {
    if (e.logprob) streamed.push_back(*e.logprob);
  };
  const auto r2 =
      specdec::AutoregressiveDecoder(t2).generate(std::vector<token_t>{1, 2}, cfg, callbacks);
  CHECK(streamed == r2.logprobs);
  CHECK(r2.logprobs.size() == 8);
}
