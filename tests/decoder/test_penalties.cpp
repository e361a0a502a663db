// Repetition penalties and logit bias in the decoders: every row, the target's and the draft's,
// drafted positions included, is adjusted for the context of its own position, so that
// speculative decoding stays exact for the penalised target (the law test with penalties is in
// test_distribution.cpp).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::GenerationConfig;
using specdec::SpeculativeOptions;
using specdec::token_t;
using specdec::test::Markov;
using specdec::test::MockLM;
namespace sp = specdec::sampling;

namespace {

constexpr std::size_t kVocab = 6;  // Markov's

/// Strong penalties over a short window (drafted tokens push prompt tokens out of it) and a bias
/// that lifts one token and bans another.
sp::Penalties strong_penalties(sp::PenaltyScope scope = sp::PenaltyScope::context) {
  sp::Penalties p;
  p.repeat = 1.6f;
  p.last_n = 3;
  p.frequency = 0.3f;
  p.presence = 0.4f;
  p.scope = scope;
  p.logit_bias = {{2, 0.7f}, {5, -std::numeric_limits<float>::infinity()}};
  return p;
}

/// The penalised, processed row of `model` after `prefix`, whose penalty context is `context`.
std::vector<float> reference_row(const MockLM& model, std::span<const token_t> prefix,
                                 std::span<const token_t> context, const sp::Penalties& pen,
                                 const sp::SamplingParams& params) {
  const std::vector<float> logits = model.logits_of(prefix);
  return sp::process_logits<float>(sp::apply_penalties(pen, context, logits), params);
}

std::vector<token_t> concat(std::vector<token_t> a, std::span<const token_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("HostSampler: p of every position is the penalised row of its context (all drafts)",
          "[decoder][penalties]") {
  const Markov target_table(5);
  const MockLM target = target_table.lm();
  const std::vector<token_t> prompt{0, 1, 1, 3};
  const sp::Penalties pen = strong_penalties();
  const sp::SamplingParams params{.temperature = 0.9f, .top_p = 0.97f};
  constexpr std::size_t k = 3;
  std::size_t rejections = 0;
  // Every proposal x_1 x_2 x_3 over the vocabulary (point masses), one verify each.
  for (std::size_t code = 0; code < kVocab * kVocab * kVocab; ++code) {
    const std::vector<token_t> drafted{static_cast<token_t>(code % kVocab),
                                       static_cast<token_t>(code / kVocab % kVocab),
                                       static_cast<token_t>(code / kVocab / kVocab)};
    INFO("draft " << drafted[0] << " " << drafted[1] << " " << drafted[2]);
    specdec::HostSampler sampler(kVocab, k);
    sampler.begin(params, code);
    sampler.set_penalties(pen);
    sampler.begin_round(prompt.back());
    sampler.set_history(prompt);
    sampler.propose(drafted);
    // The target rows of the verify: after prompt, prompt + x_1, ..., prompt + x_1 x_2 x_3.
    std::vector<std::vector<float>> want;
    std::vector<float> rows;
    for (std::size_t r = 0; r <= k; ++r) {
      const std::vector<token_t> prefix =
          concat(prompt, std::span<const token_t>(drafted).first(r));
      const std::vector<float> logits = target.logits_of(prefix);
      rows.insert(rows.end(), logits.begin(), logits.end());
      want.push_back(reference_row(target, prefix, prefix, pen, params));
    }
    const auto verdict =
        sampler.verify(specdec::LogitsView{rows.data(), k + 1, kVocab, specdec::Memory::host}, k,
                       specdec::Proposal::point_mass, prompt.size() - 1);
    for (std::size_t i = 0; i < k; ++i)
      CHECK(verdict.p_drafted[i] == want[i][static_cast<std::size_t>(drafted[i])]);
    // The row the verification read in full: the rejected one, or the bonus row.
    const std::size_t full = verdict.accepted;
    const std::span<const float> p = sampler.p_rows().subspan(full * kVocab, kVocab);
    CHECK(std::vector<float>(p.begin(), p.end()) == want[full]);
    CHECK(want[full][5] == 0.0f);  // banned
    rejections += verdict.accepted < k;
  }
  CHECK(rejections > 100);
}

TEST_CASE("HostSampler: q of every drafted position is the penalised draft row of its context",
          "[decoder][penalties]") {
  const Markov draft_table(6);
  const MockLM draft = draft_table.lm();
  const std::vector<token_t> prompt{0, 1, 1, 3};
  constexpr std::size_t k = 3;
  for (const sp::PenaltyScope scope : {sp::PenaltyScope::context, sp::PenaltyScope::completion}) {
    const sp::Penalties pen = strong_penalties(scope);
    // The history a session hands over: the prompt (context scope) or nothing yet (completion).
    const std::vector<token_t> history =
        scope == sp::PenaltyScope::context ? prompt : std::vector<token_t>{};
    const sp::SamplingParams params{.temperature = 1.5f};
    std::set<std::vector<token_t>> paths;
    for (std::uint64_t seed = 0; seed < 3000; ++seed) {
      specdec::HostSampler sampler(kVocab, k);
      sampler.begin(params, seed);
      sampler.set_penalties(pen);
      sampler.begin_round(prompt.back());
      sampler.set_history(history);
      std::vector<token_t> drafted;
      std::vector<std::vector<float>> want;
      for (std::size_t i = 0; i < k; ++i) {
        const std::vector<token_t> prefix = concat(prompt, drafted);
        const std::vector<float> logits = draft.logits_of(prefix);
        want.push_back(reference_row(draft, prefix, concat(history, drafted), pen, params));
        sampler.draft_rows(specdec::LogitsView{logits.data(), 1, kVocab, specdec::Memory::host}, 1,
                           prefix.size() - 1);
        drafted.push_back(sampler.last_drafted()[0]);
      }
      for (std::size_t i = 0; i < k; ++i) {
        const std::span<const float> q = sampler.q_rows().subspan(i * kVocab, kVocab);
        REQUIRE(std::vector<float>(q.begin(), q.end()) == want[i]);
      }
      paths.insert(drafted);
    }
    // Token 5 is banned: the drafts cover 5^3 = 125 paths; nearly all of them were checked.
    CHECK(paths.size() >= 110);
    for (const auto& path : paths) CHECK(std::count(path.begin(), path.end(), 5) == 0);
  }
}

TEST_CASE("greedy speculative decoding equals greedy target-only decoding with penalties",
          "[decoder][penalties]") {
  const Markov target_table(5);
  const Markov draft_table(6);
  const std::vector<std::vector<token_t>> prompts{
      {0, 1, 1, 3}, {4, 4, 4, 4, 4}, {2}, {1, 0, 3, 2, 1, 0, 3, 2}};
  for (const sp::PenaltyScope scope : {sp::PenaltyScope::context, sp::PenaltyScope::completion}) {
    GenerationConfig cfg = specdec::test::greedy(40);
    cfg.penalties = strong_penalties(scope);
    cfg.penalties.last_n = 5;
    std::size_t differs_from_unpenalised = 0;
    for (const auto& prompt : prompts) {
      INFO("prompt of " << prompt.size() << " tokens, scope " << static_cast<int>(scope));
      // The reference: argmax of each penalised row, one token at a time.
      std::vector<token_t> want;
      {
        const MockLM target = target_table.lm();
        std::vector<token_t> seq = prompt;
        for (std::size_t i = 0; i < cfg.max_new_tokens; ++i) {
          const std::span<const token_t> context =
              scope == sp::PenaltyScope::context
                  ? std::span<const token_t>(seq)
                  : std::span<const token_t>(seq).subspan(prompt.size());
          const auto row = sp::apply_penalties(cfg.penalties, context, target.logits_of(seq));
          want.push_back(static_cast<token_t>(sp::argmax<float>(row)));
          seq.push_back(want.back());
        }
      }
      MockLM target = target_table.lm();
      CHECK(specdec::AutoregressiveDecoder(target).generate(prompt, cfg).tokens == want);
      for (const std::size_t k : {1, 3, 5}) {
        MockLM t = target_table.lm();
        MockLM d = draft_table.lm();
        specdec::SpeculativeDecoder dec(d, t, SpeculativeOptions{.k = k});
        CHECK(dec.generate(prompt, cfg).tokens == want);
      }
      {
        MockLM t = target_table.lm();
        specdec::NGramDrafter ngram;
        specdec::SpeculativeDecoder dec(ngram, t, SpeculativeOptions{.k = 4});
        CHECK(dec.generate(prompt, cfg).tokens == want);
      }
      MockLM plain = target_table.lm();
      differs_from_unpenalised += specdec::AutoregressiveDecoder(plain)
                                      .generate(prompt, specdec::test::greedy(40))
                                      .tokens != want;
    }
    CHECK(differs_from_unpenalised == prompts.size());  // the penalties did change the text
  }
}

TEST_CASE("the completion scope counts only the current turn's tokens", "[decoder][penalties]") {
  const Markov target_table(5);
  const Markov draft_table(6);
  GenerationConfig cfg = specdec::test::greedy(12);
  cfg.penalties = strong_penalties(sp::PenaltyScope::completion);
  cfg.penalties.last_n = -1;
  const std::vector<token_t> prompt{0, 1, 1, 3};
  const std::vector<token_t> turn2{4, 0};
  MockLM t = target_table.lm();
  MockLM d = draft_table.lm();
  specdec::SpeculativeDecoder dec(d, t, SpeculativeOptions{.k = 3});
  const auto first = dec.generate(prompt, cfg);
  const auto second = dec.continue_with(turn2, cfg);
  // The reference for the second turn: its window starts after turn2.
  const MockLM target = target_table.lm();
  std::vector<token_t> seq = concat(concat(prompt, first.tokens), turn2);
  const std::size_t begin = seq.size();
  std::vector<token_t> want;
  for (std::size_t i = 0; i < cfg.max_new_tokens; ++i) {
    const auto row = sp::apply_penalties(
        cfg.penalties, std::span<const token_t>(seq).subspan(begin), target.logits_of(seq));
    want.push_back(static_cast<token_t>(sp::argmax<float>(row)));
    seq.push_back(want.back());
  }
  CHECK(second.tokens == want);
}

TEST_CASE("bad penalties are refused before anything runs", "[decoder][penalties]") {
  const Markov table(5);
  MockLM target = table.lm();
  GenerationConfig cfg = specdec::test::greedy(4);
  cfg.penalties.logit_bias = {{6, 1.0f}};  // the vocabulary has 6 tokens
  CHECK_THROWS_WITH(specdec::AutoregressiveDecoder(target).generate(std::vector<token_t>{1}, cfg),
                    Catch::Contains("token 6, outside the vocabulary"));
  CHECK(target.forwards == 0);
}
