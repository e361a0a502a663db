// The round API (SpeculativeSession): continuing a conversation prefills only the new tokens;
// a stop inside a round leaves the caches at the sequence; the three phases of a round let a
// driver run several sequences in lockstep with the tokens each would get alone; cancel() in the
// middle of a round; the autoregressive decoder as k = 0 rounds; NaN / infinite logits name the
// model and the position. Scripted mock models (mock_lm.hpp) record every call.

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec_test.hpp"

using specdec::GenerationConfig;
using specdec::SpeculativeDecoder;
using specdec::SpeculativeOptions;
using specdec::SpeculativeSession;
using specdec::StopReason;
using specdec::token_t;
using specdec::test::counting_model;
using specdec::test::fwd;
using specdec::test::greedy;
using specdec::test::Markov;
using specdec::test::MockLM;
using specdec::test::one_hot_logits;
using specdec::test::rb;
using Calls = std::vector<MockLM::Call>;

namespace {

constexpr std::size_t kVocab = 32;

}  // namespace

TEST_CASE("append() continues a conversation, prefilling only the new tokens", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64, {11});  // wrong when predicting position 11
  SpeculativeSession session(draft, target, SpeculativeOptions{.k = 2});
  session.start(std::vector<token_t>{1, 2, 3}, greedy(3));
  auto first = session.run();
  CHECK(first.tokens == std::vector<token_t>{4, 5, 6});
  // Round 1 (length 3): draft 4 5, bonus 6. The target holds 1 .. 5; 6 is not fed yet.
  CHECK(target.cached() == 5);
  target.calls.clear();
  draft.calls.clear();

  // The user's turn: 20 21. Only 6 (fed by no model yet) and 20 are prefilled into the target;
  // 21 is the first token of the next verify.
  session.append(std::vector<token_t>{20, 21}, greedy(4));
  CHECK(target.calls == Calls{fwd({6, 20}, 5)});
  CHECK(draft.calls == Calls{fwd({5, 6, 20}, 4)});  // the draft never consumed 5 (x_k) nor 6
  auto second = session.run();
  CHECK(second.tokens == std::vector<token_t>{22, 23, 24, 25});
  CHECK(second.stats.prompt_tokens == 2);
  CHECK(session.sequence() == std::vector<token_t>{1, 2, 3, 4, 5, 6, 20, 21, 22, 23, 24, 25});
  // No prefill of the shared prefix: the first forward of the continuation starts at position 5.
  CHECK(target.calls.front().cached_before == 5);

  // The same tokens as a fresh generation over the whole conversation (the mocks' logits depend
  // on everything in their caches, so any bookkeeping slip would show).
  MockLM fresh_target = counting_model(64);
  MockLM fresh_draft = counting_model(64, {11});
  SpeculativeDecoder fresh(fresh_draft, fresh_target, SpeculativeOptions{.k = 2});
  CHECK(fresh.generate(std::vector<token_t>{1, 2, 3, 4, 5, 6, 20, 21}, greedy(4)).tokens ==
        second.tokens);

  // append() needs a finished generation, start() a session not in the middle of a round.
  session.append(std::vector<token_t>{1}, greedy(5));
  CHECK_THROWS_AS(session.append(std::vector<token_t>{1}, greedy(5)), specdec::Error);
  (void)session.propose();
  CHECK_THROWS_AS(session.start(std::vector<token_t>{1}, greedy(1)), specdec::Error);
  CHECK_THROWS_AS(session.propose(), specdec::Error);
}

TEST_CASE("a stop inside a round leaves the caches at the sequence, the next turn goes on",
          "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeSession session(draft, target, SpeculativeOptions{.k = 6});
  GenerationConfig cfg = greedy(20);
  cfg.eos_token = 7;
  session.start(std::vector<token_t>{1, 2, 3}, cfg);
  const auto r = session.run();
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6});
  CHECK(r.stop_reason == StopReason::eos);
  // The verify fed 3 .. 9 and accepted all six; EOS (7) cut the emission after 6: the caches are
  // cut back to the sequence 1 .. 6 (EOS is not part of it).
  CHECK(target.cached() == 6);
  CHECK(draft.cached() <= 6);
  session.append(std::vector<token_t>{10}, greedy(3));
  CHECK(session.run().tokens == std::vector<token_t>{11, 12, 13});
}

TEST_CASE("the phases of a round drive several sequences in lockstep", "[decoder]") {
  // Three sequences, sampled, each with its own pair of models and seed: driven together phase
  // by phase (as a batcher would, with one target forward per sequence standing in for a
  // batched one), each gets exactly the tokens generate() gives it alone.
  const Markov p_model(3), q_model(4);
  struct Sequence {
    MockLM target, draft;
    std::vector<token_t> prompt;
    std::uint64_t seed;
  };
  std::vector<Sequence> seqs;
  for (std::uint64_t b = 0; b < 3; ++b)
    seqs.push_back({p_model.lm(), q_model.lm(), {1, static_cast<token_t>(b), 2}, 11 + b});
  auto config = [](std::uint64_t seed) {
    GenerationConfig cfg;
    cfg.max_new_tokens = 12 + seed % 3;
    cfg.sampling.temperature = 0.9f;
    cfg.seed = seed;
    cfg.stop_at_eos = false;
    return cfg;
  };
  std::vector<std::vector<token_t>> alone;
  for (auto& s : seqs) {
    SpeculativeDecoder dec(s.draft, s.target, SpeculativeOptions{.k = 3});
    alone.push_back(dec.generate(s.prompt, config(s.seed)).tokens);
  }

  std::vector<std::unique_ptr<SpeculativeSession<MockLM, MockLM>>> sessions;
  for (auto& s : seqs) {
    sessions.push_back(std::make_unique<SpeculativeSession<MockLM, MockLM>>(
        s.draft, s.target, SpeculativeOptions{.k = 3}));
    sessions.back()->start(s.prompt, config(s.seed));
  }
  for (bool running = true; running;) {
    running = false;
    std::vector<specdec::TargetInput> inputs(seqs.size());
    for (std::size_t b = 0; b < seqs.size(); ++b)  // phase 1 for every live sequence
      if (!sessions[b]->done()) inputs[b] = sessions[b]->propose();
    std::vector<specdec::LogitsView> rows(seqs.size());
    for (std::size_t b = 0; b < seqs.size(); ++b)  // phase 2: the target forwards
      if (!sessions[b]->done()) rows[b] = seqs[b].target.forward(inputs[b].host);
    for (std::size_t b = 0; b < seqs.size(); ++b) {  // phase 3
      if (sessions[b]->done()) continue;
      sessions[b]->accept(rows[b]);
      running = running || !sessions[b]->done();
    }
  }
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    INFO("sequence " << b);
    CHECK(sessions[b]->result().tokens == alone[b]);
  }
}

TEST_CASE("cancel() in the middle of a round restores the bookkeeping", "[decoder]") {
  MockLM target = counting_model(64);
  MockLM draft = counting_model(64);
  SpeculativeSession session(draft, target, SpeculativeOptions{.k = 3});
  session.start(std::vector<token_t>{1, 2, 3}, greedy(10));
  const auto input = session.propose();
  (void)target.forward(input.host);  // the caller even ran the verify forward
  session.cancel();
  CHECK(session.done());
  CHECK(session.result().stop_reason == StopReason::cancelled);
  CHECK(target.cached() == 2);
  CHECK(draft.cached() <= 3);
  session.append(std::vector<token_t>{4}, greedy(2));
  CHECK(session.run().tokens == std::vector<token_t>{5, 6});
}

TEST_CASE("the autoregressive decoder is a session of k = 0 rounds", "[decoder]") {
  MockLM model = counting_model(64);
  specdec::AutoregressiveDecoder dec(model);
  const auto r = dec.generate(std::vector<token_t>{1, 2, 3}, greedy(3));
  CHECK(r.tokens == std::vector<token_t>{4, 5, 6});
  REQUIRE(r.rounds.size() == 3);
  for (const auto& round : r.rounds) {
    CHECK(round.draft_length == 0);
    CHECK(round.drafted.empty());
    CHECK(round.emitted == 1);
  }
  CHECK(model.calls == Calls{rb(0, 0), fwd({1, 2}, 0), fwd({3}, 2), fwd({4}, 3), fwd({5}, 4)});
  CHECK(r.stats.draft_passes == 0);
  CHECK(r.stats.rounds == 3);
  // The conversation goes on without a new prefill of what the model holds.
  model.calls.clear();
  CHECK(dec.continue_with(std::vector<token_t>{9}, greedy(2)).tokens ==
        std::vector<token_t>{10, 11});
  CHECK(model.calls == Calls{fwd({6}, 5), fwd({9}, 6), fwd({10}, 7)});
}

TEST_CASE("NaN and infinite logits name the model and the position", "[decoder]") {
  // Logits with a NaN (target) or +inf (draft) at token 2 once the prefix has 6 tokens, i.e. in
  // the row of position 5.
  auto bad_at = [](std::size_t length, float value) {
    return MockLM(kVocab, 64, [length, value](std::span<const token_t> prefix) {
      auto row = one_hot_logits(kVocab, static_cast<token_t>((prefix.back() + 1) % kVocab));
      if (prefix.size() == length) row[2] = value;
      return row;
    });
  };
  const std::vector<token_t> prompt{1, 2, 3};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float temperature : {0.0f, 0.7f}) {
    INFO("temperature " << temperature);
    GenerationConfig cfg = greedy(8);
    cfg.sampling.temperature = temperature;
    {
      MockLM target = bad_at(6, nan);
      MockLM draft = counting_model(64);
      SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 4});
      CHECK_THROWS_WITH(dec.generate(prompt, cfg),
                        "target model: logits at position 5 contain NaN (token 2)");
      MockLM alone = bad_at(6, nan);
      specdec::AutoregressiveDecoder plain(alone);
      CHECK_THROWS_WITH(plain.generate(prompt, cfg),
                        "target model: logits at position 5 contain NaN (token 2)");
    }
    {
      MockLM target = counting_model(64);
      MockLM draft = bad_at(6, inf);
      SpeculativeDecoder dec(draft, target, SpeculativeOptions{.k = 4});
      CHECK_THROWS_WITH(dec.generate(prompt, cfg),
                        "draft model: logits at position 5 contain +inf (token 2)");
    }
  }
}

/// A model-free drafter proposing the counting model's continuation, round r proposing
/// sizes[r % sizes.size()] tokens (at most k).
struct ScriptedDrafter {
  std::vector<std::size_t> sizes;
  std::size_t round = 0;
  std::vector<token_t> proposal;
  [[nodiscard]] std::size_t vocab_size() const { return 0; }
  [[nodiscard]] std::size_t max_draft(std::size_t) const { return 64; }
  void start(std::span<const token_t>) { round = 0; }
  void extend(std::span<const token_t>) {}
  void keep(std::size_t) {}
  template <specdec::RoundSampler S>
  specdec::DraftResult draft(std::span<const token_t> sequence, std::size_t k, S& sampler) {
    proposal.clear();
    const std::size_t m = std::min(k, sizes[round++ % sizes.size()]);
    for (std::size_t i = 0; i < m; ++i)
      proposal.push_back(static_cast<token_t>((sequence.back() + 1 + static_cast<token_t>(i)) %
                                              static_cast<token_t>(kVocab)));
    sampler.propose(std::span<const token_t>(proposal));
    return specdec::DraftResult{proposal.size(), specdec::Proposal::point_mass, 0};
  }
};

TEST_CASE("min_draft: shorter proposals are plain target steps, the output unchanged",
          "[decoder]") {
  // Proposals of 1, 4, 2, 3 tokens in turn; with min_draft 3 the 1- and 2-token ones are
  // dropped (llama.cpp's --draft-min): those rounds verify nothing and emit one token.
  const std::vector<token_t> prompt = {1, 2, 3};
  auto run = [&](std::size_t min_draft) {
    MockLM target = counting_model(64, {7, 12});
    ScriptedDrafter drafter{{1, 4, 2, 3}, 0, {}};
    SpeculativeOptions options;
    options.k = 4;
    options.min_draft = min_draft;
    SpeculativeDecoder<ScriptedDrafter, MockLM> decoder(drafter, target, options);
    return decoder.generate(prompt, greedy(20));
  };
  const auto plain = run(0);
  const auto windowed = run(3);
  CHECK(windowed.tokens == plain.tokens);  // greedy: exact either way
  std::vector<std::size_t> plain_sizes, windowed_sizes;
  for (const auto& round : plain.rounds) plain_sizes.push_back(round.drafted.size());
  for (const auto& round : windowed.rounds) windowed_sizes.push_back(round.drafted.size());
  CHECK(plain_sizes[0] == 1);
  CHECK(plain_sizes[1] == 4);
  CHECK(windowed_sizes[0] == 0);  // 1 < 3: not verified
  CHECK(windowed.rounds[0].emitted == 1);
  CHECK(windowed_sizes[1] == 4);
  CHECK(windowed_sizes[2] == 0);  // 2 < 3
  for (const std::size_t size : windowed_sizes) CHECK((size == 0 || size >= 3));

  MockLM target = counting_model(64);
  ScriptedDrafter drafter{{1}, 0, {}};
  SpeculativeOptions bad;
  bad.k = 2;
  bad.min_draft = 3;
  CHECK_THROWS_WITH((SpeculativeDecoder<ScriptedDrafter, MockLM>(drafter, target, bad)),
                    Catch::Contains("min_draft 3") && Catch::Contains("largest draft length 2"));
}

TEST_CASE("the round record carries p(x) and q(x) of the drafted tokens", "[decoder]") {
  // Sampled drafting from a Markov draft against a Markov target: p(x_i) and q(x_i) in the
  // record are the processed distributions' values at the drafted tokens (recomputed here from
  // the models' logits with the same processing).
  const Markov target_law(11), draft_law(12);
  MockLM target = target_law.lm(), draft = draft_law.lm();
  SpeculativeOptions options;
  options.k = 3;
  SpeculativeDecoder<MockLM, MockLM> decoder(draft, target, options);
  GenerationConfig cfg = greedy(24);
  cfg.sampling.temperature = 0.9f;
  cfg.seed = 5;
  const auto result = decoder.generate(std::vector<token_t>{1, 2}, cfg);
  REQUIRE_FALSE(result.rounds.empty());
  std::vector<token_t> sequence = {1, 2};
  for (const auto& round : result.rounds) {
    REQUIRE(round.p_drafted.size() == round.drafted.size());
    REQUIRE(round.q_drafted.size() == round.drafted.size());
    std::vector<token_t> prefix = sequence;
    for (std::size_t i = 0; i < round.drafted.size(); ++i) {
      const auto x = static_cast<std::size_t>(round.drafted[i]);
      auto probs = [&](MockLM& m) {
        const std::vector<float> logits = m.logits_of(prefix);
        return specdec::sampling::process_logits<float>(logits, cfg.sampling);
      };
      CHECK(round.p_drafted[i] == probs(target)[x]);
      CHECK(round.q_drafted[i] == probs(draft)[x]);
      prefix.push_back(round.drafted[i]);
    }
    for (std::size_t i = 0; i < round.accepted; ++i) sequence.push_back(round.drafted[i]);
    sequence.push_back(round.next);
  }
}
