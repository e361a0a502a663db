// SpeculativeDecoder bookkeeping, round by round, with scripted greedy mock models: which tokens
// each model is fed, when it is rolled back, and where generation stops. The expected call logs
// are the steps of docs/decoder.md ("One round") worked out by hand for each script.

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec_test.hpp"

using specdec::AutoregressiveDecoder;
using specdec::GenerationConfig;
using specdec::SpeculativeDecoder;
using specdec::SpeculativeOptions;
using specdec::StopReason;
using specdec::token_t;
using specdec::test::counting_model;
using specdec::test::fwd;
using specdec::test::greedy;
using specdec::test::MockLM;
using specdec::test::one_hot_logits;
using specdec::test::rb;
using Calls = std::vector<MockLM::Call>;

namespace {

constexpr std::size_t kVocab = 32;

const std::vector<token_t> kPrompt{1, 2, 3};

}  // namespace

TEST_CASE("speculative rounds: full acceptance, rejection, first-token rejection, budget",
          "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64, {9, 10});  // wrong when predicting positions 9 and 10
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 3});
  const auto r = dec.generate(kPrompt, greedy(10));

  // Target-only greedy output: 4, 5, ..., 13.
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  CHECK(r.stop_reason == StopReason::max_tokens);

  // Start: both models reset and prefill the prompt minus its last token.
  // Round 1 (sequence length 3, k = 3): the draft feeds 3 (its unseen token), then 4, 5; drafts
  //   4 5 6 (6 is never fed). Target verifies 3 4 5 6: all accepted, bonus 7. Nothing to roll back.
  // Round 2 (length 7, k = 3): the draft has 1..5 and feeds 6 (x_k of the full acceptance) and
  //   7 (the bonus), then 8, 9; drafts 8 9 11. Target verifies 7 8 9 11: 11 rejected, y = 10;
  //   target rolls back to 7 + 2 = 9 positions; the draft holds exactly 9 already.
  // Round 3 (length 10, k = min(3, budget 3 - 1) = 2): draft feeds 10, then 12; drafts 12 13.
  //   Target verifies 10 12 13: 12 rejected at once, y = 11; target back to 10, draft back to 10.
  // Round 4 (length 11, k = min(3, 2 - 1) = 1): draft feeds 11, drafts 12 (not fed). Target
  //   verifies 11 12: accepted, bonus 13. Budget of 10 reached.
  CHECK(target.calls == Calls{rb(0, 0), fwd({1, 2}, 0),                 //
                              fwd({3, 4, 5, 6}, 2),                     // round 1
                              fwd({7, 8, 9, 11}, 6), rb(9, 10),         // round 2
                              fwd({10, 12, 13}, 9), rb(10, 12),         // round 3
                              fwd({11, 12}, 10)});                      // round 4
  CHECK(draft.calls == Calls{rb(0, 0), fwd({1, 2}, 0),                  //
                             fwd({3}, 2), fwd({4}, 3), fwd({5}, 4),     // round 1
                             fwd({6, 7}, 5), fwd({8}, 7), fwd({9}, 8),  // round 2
                             fwd({10}, 9), fwd({12}, 10), rb(10, 11),   // round 3
                             fwd({11}, 10)});                           // round 4

  REQUIRE(r.rounds.size() == 4);
  CHECK(r.rounds[0].drafted == std::vector<token_t>{4, 5, 6});
  CHECK(r.rounds[0].accepted == 3);
  CHECK(r.rounds[0].bonus);
  CHECK(r.rounds[0].rejected == -1);
  CHECK(r.rounds[0].next == 7);
  CHECK(r.rounds[1].drafted == std::vector<token_t>{8, 9, 11});
  CHECK(r.rounds[1].accepted == 2);
  CHECK(!r.rounds[1].bonus);
  CHECK(r.rounds[1].rejected == 11);
  CHECK(r.rounds[1].next == 10);
  CHECK(r.rounds[2].draft_length == 2);
  CHECK(r.rounds[2].accepted == 0);
  CHECK(r.rounds[2].rejected == 12);
  CHECK(r.rounds[2].next == 11);
  CHECK(r.rounds[3].draft_length == 1);
  CHECK(r.rounds[3].position == 11);
  CHECK(r.rounds[3].emitted == 2);

  const auto& s = r.stats;
  CHECK(s.tokens_emitted == 10);
  CHECK(s.rounds == 4);
  CHECK(s.target_passes == 4);
  CHECK(s.draft_passes == 9);
  CHECK(s.drafted == 9);
  CHECK(s.accepted == 6);
  CHECK(s.acceptance_rate == Approx(6.0 / 9.0));
  CHECK(s.mean_tokens_per_round == Approx(2.5));
  CHECK(s.accepted_histogram == std::vector<std::size_t>{1, 1, 1, 1});
}

TEST_CASE("speculative rounds with k = 1", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64, {5});  // wrong when predicting position 5
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 1});
  const auto r = dec.generate(kPrompt, greedy(5));
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6, 7, 8});
  // Round 1 (length 3): draft feeds 3, drafts 4 (accepted), bonus 5.
  // Round 2 (length 5): draft feeds 4 (x_k) and 5, drafts 7 (wrong): rejected, y = 6; the draft
  //   holds 1..5 = length + 0 already (x_1 is never fed when k = 1), the target rolls back to 5.
  // Round 3 (length 6): draft feeds 6, drafts 7: accepted, bonus 8 -> 5 tokens.
  CHECK(target.calls ==
        Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3, 4}, 2), fwd({5, 7}, 4), rb(5, 6), fwd({6, 7}, 5)});
  CHECK(draft.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3}, 2), fwd({4, 5}, 3), fwd({6}, 5)});
  CHECK(r.stats.accepted_histogram == std::vector<std::size_t>{1, 2});
}

TEST_CASE("a one-token prompt prefills nothing", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 2});
  const auto r = dec.generate(std::vector<token_t>{5}, greedy(3));
  CHECK(r.tokens == std::vector<token_t>{6, 7, 8});
  CHECK(target.calls == Calls{rb(0, 0), fwd({5, 6, 7}, 0)});
  CHECK(draft.calls == Calls{rb(0, 0), fwd({5}, 0), fwd({6}, 1)});
}

TEST_CASE("a budget of one token is a plain target step", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 4});
  const auto r = dec.generate(kPrompt, greedy(1));
  CHECK(r.tokens == std::vector<token_t>{4});
  CHECK(target.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3}, 2)});
  CHECK(draft.calls == Calls{rb(0, 0), fwd({1, 2}, 0)});
  CHECK(r.stats.drafted == 0);
  CHECK(r.stats.accepted_histogram.empty());
}

TEST_CASE("a budget of zero returns at once", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target);
  const auto r = dec.generate(kPrompt, greedy(0));
  CHECK(r.tokens.empty());
  CHECK(r.stop_reason == StopReason::max_tokens);
}

TEST_CASE("the target's context limit shrinks k and stops with context_full", "[decoder]") {
  MockLM target = counting_model(8);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 6});
  const auto r = dec.generate(kPrompt, greedy(100));
  // Length 3: at most 8 - 3 - 1 = 4 drafted tokens (verify ends at position 7, y lands at 8 - 1).
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6, 7, 8});
  CHECK(r.stop_reason == StopReason::context_full);
  CHECK(target.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3, 4, 5, 6, 7}, 2)});
  CHECK(r.rounds.at(0).draft_length == 4);

  // The same with the baseline: one token per step until the sequence fills the context.
  MockLM alone = counting_model(8);
  AutoregressiveDecoder base(alone);
  const auto b = base.generate(kPrompt, greedy(100));
  CHECK(b.tokens == r.tokens);
  CHECK(b.stop_reason == StopReason::context_full);
}

TEST_CASE("the draft's context limit: draft less, then continue target-only", "[decoder]") {
  MockLM target = counting_model(12);
  MockLM draft = counting_model(5);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 4});
  const auto r = dec.generate(kPrompt, greedy(100));
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(r.stop_reason == StopReason::context_full);
  // Length 3: the draft holds 3 - 1 + k - 1 positions <= 5, so k = 3. Then the draft is full:
  // plain target steps until the target's context is full.
  CHECK(draft.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3}, 2), fwd({4}, 3), fwd({5}, 4)});
  CHECK(target.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3, 4, 5, 6}, 2), fwd({7}, 6),
                              fwd({8}, 7), fwd({9}, 8), fwd({10}, 9), fwd({11}, 10)});
  CHECK(r.stats.rounds == 6);
  CHECK(r.stats.drafted == 3);
}

TEST_CASE("a prompt that fills the context stops at once, a longer one is refused", "[decoder]") {
  MockLM target = counting_model(3);
  MockLM draft = counting_model(3);
  SpeculativeDecoder dec(draft, target);
  CHECK(dec.generate(kPrompt, greedy(5)).stop_reason == StopReason::context_full);
  CHECK_THROWS_AS(dec.generate(std::vector<token_t>{1, 2, 3, 4}, greedy(5)), specdec::Error);
  CHECK_THROWS_AS(dec.generate(std::vector<token_t>{}, greedy(5)), specdec::Error);
  CHECK_THROWS_AS(dec.generate(std::vector<token_t>{1, 99}, greedy(5)), specdec::Error);
}

TEST_CASE("EOS stops generation and is not emitted, also inside an accepted draft", "[decoder]") {
  // Counting with EOS = 7: the target's sequence is 4 5 6 then EOS.
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 8});
  GenerationConfig cfg = greedy(20);
  cfg.eos_token = 7;
  const auto r = dec.generate(kPrompt, cfg);
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6});
  CHECK(r.stop_reason == StopReason::eos);
  CHECK(r.rounds.at(0).emitted == 3);

  cfg.stop_at_eos = false;
  CHECK(dec.generate(kPrompt, cfg).tokens.size() == 20);
}

TEST_CASE("should_stop cancels between rounds", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 2});
  int polls = 0;
  specdec::Callbacks cb;
  cb.should_stop = [&] { return ++polls > 2; };
  std::vector<token_t> streamed;
  cb.on_token = [&](const specdec::TokenEvent& e) { streamed.push_back(e.token); };
  const auto r = dec.generate(kPrompt, greedy(100), cb);
  CHECK(r.stop_reason == StopReason::cancelled);
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6, 7, 8, 9});
  CHECK(streamed == r.tokens);
}

TEST_CASE("vocabulary and tokenizer mismatches are refused", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM small(16, 64, [](std::span<const token_t>) { return one_hot_logits(16, 0); });
  CHECK_THROWS_AS(SpeculativeDecoder(small, target), specdec::Error);
  CHECK_THROWS_AS(SpeculativeDecoder(target, target), specdec::Error);
  MockLM draft = counting_model(64);
  specdec::test::MockTokenizer a(std::vector<std::string>(kVocab, "a"));
  specdec::test::MockTokenizer b(std::vector<std::string>(kVocab - 1, "b"));
  CHECK_THROWS_AS(SpeculativeDecoder(draft, target, {}, &a, &b), specdec::Error);
  CHECK_NOTHROW(SpeculativeDecoder(draft, target, {}, &a, &a));
  CHECK_THROWS_AS(SpeculativeDecoder(draft, target, SpeculativeOptions{.k = 0}), specdec::Error);
}

TEST_CASE("device-resident logits are refused with a clear error", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  target.where = specdec::Memory::device;
  SpeculativeDecoder dec(draft, target);
  CHECK_THROWS_WITH(dec.generate(kPrompt, greedy(4)), Catch::Contains("device memory"));
  AutoregressiveDecoder base(target);
  CHECK_THROWS_WITH(base.generate(kPrompt, greedy(4)), Catch::Contains("device memory"));
}

// Random scripts: order-2 Markov models whose logits depend on the last two tokens and the
// position, so that a model fed the wrong tokens (or at the wrong position) answers differently.
// Greedy speculative output must equal greedy target-only output for every drafter and k.
TEST_CASE("greedy speculative output equals greedy target-only output (random scripts)",
          "[decoder]") {
  constexpr std::size_t vocab = 6;
  for (std::uint32_t script = 0; script < 30; ++script) {
    auto table = [](std::uint32_t seed) {
      std::mt19937 gen(seed);
      std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
      std::vector<float> t(vocab * vocab * 3 * vocab);
      for (auto& x : t) x = dist(gen);
      return t;
    };
    const std::vector<float> p_table = table(2 * script);
    std::vector<float> q_table = table(2 * script + 1);
    // The draft agrees with the target on most contexts (mix the tables).
    for (std::size_t i = 0; i < q_table.size(); ++i) q_table[i] = 0.3f * q_table[i] + p_table[i];
    auto model = [](const std::vector<float>& t, std::size_t context) {
      return MockLM(vocab, context, [&t](std::span<const token_t> prefix) {
        const std::size_t a = static_cast<std::size_t>(prefix.back());
        const std::size_t b =
            prefix.size() > 1 ? static_cast<std::size_t>(prefix[prefix.size() - 2]) : 0;
        const std::size_t offset = ((a * vocab + b) * 3 + prefix.size() % 3) * vocab;
        return std::vector<float>(t.begin() + static_cast<std::ptrdiff_t>(offset),
                                  t.begin() + static_cast<std::ptrdiff_t>(offset + vocab));
      });
    };
    const std::vector<token_t> prompt{static_cast<token_t>(script % vocab), 1, 2, 1};
    const std::size_t context = 40 + script % 7;
    MockLM alone = model(p_table, context);
    const auto reference = AutoregressiveDecoder(alone).generate(prompt, greedy(64));

    for (std::size_t k : {1, 2, 3, 5, 8}) {
      MockLM target = model(p_table, context);
      MockLM draft = model(q_table, context - script % 5);
      SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = k});
      const auto r = dec.generate(prompt, greedy(64));
      INFO("script " << script << ", k = " << k);
      CHECK(r.tokens == reference.tokens);
      CHECK(r.stop_reason == reference.stop_reason);
    }
    {
      MockLM target = model(p_table, context);
      MockLM draft = model(q_table, context);
      SpeculativeDecoder dec(draft, target, SpeculativeOptions{.adaptive = true});
      INFO("script " << script << ", adaptive");
      CHECK(dec.generate(prompt, greedy(64)).tokens == reference.tokens);
    }
    {
      MockLM target = model(p_table, context);
      specdec::NGramDrafter ngram;
      SpeculativeDecoder dec(ngram, target, SpeculativeOptions{.k = 4});
      INFO("script " << script << ", n-gram");
      CHECK(dec.generate(prompt, greedy(64)).tokens == reference.tokens);
    }
  }
}
