// The n-gram drafter's lookup rule, the adaptive draft-length rule, and the output side shared by
// both decoders: stop strings, streamed text pieces, statistics fields.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/cost_model.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec_test.hpp"

using specdec::AdaptiveDraftLength;
using specdec::GenerationConfig;
using specdec::NGramDrafter;
using specdec::StopReason;
using specdec::token_t;
using specdec::test::MockLM;
using specdec::test::MockTokenizer;
using specdec::test::one_hot_logits;

namespace {

std::vector<token_t> ngram_draft(const NGramDrafter& d, std::vector<token_t> seq, std::size_t k) {
  std::vector<token_t> out;
  d.propose(seq, k, out);
  return out;
}

}  // namespace

TEST_CASE("n-gram drafter: longest suffix match, most recent occurrence", "[decoder]") {
  const NGramDrafter d;  // n-grams of 3 down to 1
  // The suffix 1 2 occurs at 0 (no 3-gram match): propose what followed it.
  CHECK(ngram_draft(d, {1, 2, 3, 4, 1, 2}, 3) == std::vector<token_t>{3, 4, 1});
  CHECK(ngram_draft(d, {1, 2, 3, 4, 1, 2}, 1) == std::vector<token_t>{3});
  // Only 1-grams match: the most recent earlier 1 is at index 3; what followed it is cut at the
  // end of the sequence.
  CHECK(ngram_draft(d, {5, 1, 7, 1, 8, 1}, 3) == std::vector<token_t>{8, 1});
  // The longer match wins over a more recent shorter one: 2 3 at index 1 beats 3 at index 4.
  CHECK(ngram_draft(d, {9, 2, 3, 6, 3, 7, 2, 3}, 2) == std::vector<token_t>{6, 3});
  // No match, too short, k = 0: nothing.
  CHECK(ngram_draft(d, {1, 2, 3, 4}, 3).empty());
  CHECK(ngram_draft(d, {1}, 3).empty());
  CHECK(ngram_draft(d, {1, 1}, 0).empty());
  CHECK(ngram_draft(d, {1, 1}, 4) == std::vector<token_t>{1});
  // A window excludes older matches.
  const NGramDrafter windowed(NGramDrafter::Options{.max_ngram = 2, .min_ngram = 1, .window = 4});
  CHECK(ngram_draft(windowed, {4, 5, 0, 0, 0, 4}, 2).empty());
  CHECK(ngram_draft(windowed, {0, 4, 5, 0, 4}, 2) == std::vector<token_t>{5, 0});
  CHECK_THROWS_AS(NGramDrafter(NGramDrafter::Options{.max_ngram = 2, .min_ngram = 0}),
                  specdec::Error);
  CHECK_THROWS_AS(NGramDrafter(NGramDrafter::Options{.max_ngram = 1, .min_ngram = 2}),
                  specdec::Error);
}

TEST_CASE("adaptive draft length follows the acceptance", "[decoder]") {
  AdaptiveDraftLength::Options o;
  o.min_k = 1;
  o.max_k = 8;
  o.initial_k = 3;
  o.decay = 0.5;
  o.draft_cost = 0.1;
  AdaptiveDraftLength rule(o);
  CHECK(rule.next() == 3);
  CHECK(rule.acceptance() == Approx(0.5));  // the priors alone

  // Decayed counts: A = 0.5 * 4 + 1 = 3, R = 0.5 * 0 + 1 = 1 -> (3 + 1) / (3 + 1 + 1 + 1).
  rule.update(4, 4);
  rule.update(4, 1);
  CHECK(rule.acceptance() == Approx(4.0 / 6.0));

  for (int i = 0; i < 20; ++i) rule.update(rule.next(), rule.next());
  CHECK(rule.next() == 8);  // always accepted: draft the most
  CHECK(rule.acceptance() > 0.9);
  for (int i = 0; i < 20; ++i) rule.update(rule.next(), 0);
  CHECK(rule.next() == 1);  // always rejected: draft the least
  CHECK(rule.acceptance() < 0.3);

  // k maximises E(k) / (1 + c k) with E(k) = (1 - a^(k+1)) / (1 - a): for a fixed estimate, a
  // cheaper draft never asks for fewer tokens.
  std::size_t previous = 0;
  for (const double cost : {2.0, 1.0, 0.5, 0.25, 0.1, 0.01}) {
    AdaptiveDraftLength::Options c = o;
    c.draft_cost = cost;
    AdaptiveDraftLength r(c);
    r.update(4, 3);
    r.update(4, 4);
    CHECK(r.next() >= previous);
    previous = r.next();
  }
  CHECK(previous == 8);

  rule.reset();
  CHECK(rule.next() == 3);
  CHECK_THROWS_AS(AdaptiveDraftLength(AdaptiveDraftLength::Options{.min_k = 0}), specdec::Error);
  CHECK_THROWS_AS(AdaptiveDraftLength(AdaptiveDraftLength::Options{.min_k = 4, .max_k = 2}),
                  specdec::Error);
}

// Measured round costs (cost_model.hpp) replace the guessed 1 + c k: C(k) = (T(k+1) + k D) / T(1).
// With costs where a longer verify is nearly free but each draft step costs half a target step,
// the rule's k is the argmax of E(k) / C(k) computed here by hand.
TEST_CASE("adaptive draft length with measured round costs", "[decoder]") {
  specdec::ForwardTimes times;
  times.target = {10.0, 10.5, 11.0, 11.5, 12.0};  // T(1) .. T(5), ms
  times.draft = 5.0;
  const std::vector<double> cost = specdec::round_costs(times, 4);
  REQUIRE(cost.size() == 5);
  CHECK(cost[0] == Approx(1.0));
  CHECK(cost[1] == Approx(1.55));  // (10.5 + 5) / 10
  CHECK(cost[4] == Approx(3.2));   // (12 + 20) / 10

  AdaptiveDraftLength::Options o;
  o.max_k = 4;
  o.decay = 0.5;
  o.round_cost = cost;
  for (const auto& [drafted, accepted] :
       std::vector<std::pair<std::size_t, std::size_t>>{{4, 4}, {4, 1}, {4, 4}, {4, 3}}) {
    AdaptiveDraftLength rule(o);
    rule.update(drafted, accepted);
    const double a = rule.acceptance();
    std::size_t best_k = 0;
    double best = -1;
    for (std::size_t k = 1; k <= 4; ++k) {
      double expected = 0;
      for (std::size_t i = 0; i <= k; ++i) expected += std::pow(a, static_cast<double>(i));
      if (expected / cost[k] > best) {
        best = expected / cost[k];
        best_k = k;
      }
    }
    INFO("a = " << a);
    CHECK(rule.next() == best_k);
    CHECK(rule.cost(2) == Approx(cost[2]));
  }
  // A table too short for max_k, or with a cost that is not positive and finite, is refused.
  o.round_cost = {1.0, 1.5};
  CHECK_THROWS_WITH(AdaptiveDraftLength(o), Catch::Contains("round_cost"));
  o.round_cost = {1.0, 1.5, 0.0, 2.0, 2.5};
  CHECK_THROWS_WITH(AdaptiveDraftLength(o), Catch::Contains("round_cost"));
  CHECK_THROWS_AS(specdec::round_costs(times, 5), specdec::Error);
}

namespace {

/// A model whose forward() only enqueues its work, as a device model does: the work (1 ms per
/// token) is done in synchronize(), its completion point. Device logits, so CausalLM requires
/// the synchronize().
struct AsyncLM {
  static constexpr specdec::Memory logits_memory = specdec::Memory::device;
  std::size_t cached_ = 0, pending = 0, synchronized = 0;
  std::vector<float> row = std::vector<float>(8, 0.0f);
  [[nodiscard]] std::size_t vocab_size() const { return 8; }
  [[nodiscard]] std::size_t context_length() const { return 64; }
  [[nodiscard]] std::size_t cached() const { return cached_; }
  specdec::LogitsView forward(std::span<const token_t> t) {
    cached_ += t.size();
    pending += t.size();
    return {row.data(), 1, 8, specdec::Memory::device};
  }
  void rollback(std::size_t n) { cached_ = n; }
  void synchronize() {
    std::this_thread::sleep_for(std::chrono::milliseconds(pending));
    pending = 0;
    ++synchronized;
  }
};
static_assert(specdec::CausalLM<AsyncLM>);

/// The same without a completion point: not a CausalLM, since its timings would be launches.
struct AsyncLMWithoutSync {
  static constexpr specdec::Memory logits_memory = specdec::Memory::device;
  [[nodiscard]] std::size_t vocab_size() const { return 8; }
  [[nodiscard]] std::size_t context_length() const { return 64; }
  [[nodiscard]] std::size_t cached() const { return 0; }
  specdec::LogitsView forward(std::span<const token_t>) { return {}; }
  void rollback(std::size_t) {}
};
static_assert(!specdec::CausalLM<AsyncLMWithoutSync>);

}  // namespace

// The cost table times each forward to its completion point: a model whose forward() returns at
// once and does its n ms of work in synchronize() gets T(n) >= n ms (sleep_for sleeps at least
// that long, so the bound cannot flake), not the microseconds of the call.
TEST_CASE("measure_forward_times waits for a device model's work", "[decoder]") {
  AsyncLM target, draft;
  const specdec::ForwardTimes times = specdec::measure_forward_times(target, &draft, 3, 4, 3);
  REQUIRE(times.target.size() == 4);
  for (std::size_t n = 1; n <= 4; ++n) {
    INFO("T(" << n << ") = " << times.target[n - 1] << " s");
    CHECK(times.target[n - 1] >= 1e-3 * static_cast<double>(n));
  }
  CHECK(times.draft >= 1e-3);
  CHECK(target.pending == 0);  // every forward, the prefix's too, was waited for
  CHECK(target.cached() == 0);
  CHECK(target.synchronized >= 2 * (2 + 4 * 3));  // before and after each timed forward
}

// Lookup first, the draft model when the lookup finds nothing: which one drafted each round, and
// the draft model's cache catching up on the tokens of lookup rounds.
TEST_CASE("n-gram lookup then the draft model", "[decoder]") {
  // Target and draft: greedy, both continue 0 1 2 3 0 1 2 3 ... (token = position mod 4).
  auto cyclic = [](std::span<const token_t> prefix) {
    return one_hot_logits(4, static_cast<token_t>(prefix.size() % 4));
  };
  MockLM target(4, 64, cyclic);
  MockLM draft(4, 64, cyclic);
  specdec::LookupThenModelDrafter<MockLM> drafter(draft, {.max_ngram = 2, .min_ngram = 2});
  specdec::SpeculativeDecoder dec(drafter, target, specdec::SpeculativeOptions{.k = 3});
  GenerationConfig cfg;
  cfg.sampling.temperature = 0;
  cfg.max_new_tokens = 12;
  cfg.record_rounds = true;
  const std::vector<token_t> prompt{0, 1};  // no 2-token suffix occurs earlier: the model drafts
  const auto r = dec.generate(prompt, cfg);
  std::vector<token_t> expected;
  for (std::size_t i = 2; i < 14; ++i) expected.push_back(static_cast<token_t>(i % 4));
  CHECK(r.tokens == expected);
  REQUIRE(r.rounds.size() >= 2);
  CHECK(r.rounds[0].drafted == std::vector<token_t>{2, 3, 0});  // the model (3 forwards)
  // Once "0 1" repeats, lookup proposes what followed it before; the model is no longer asked.
  CHECK(drafter.lookup_rounds() > 0);
  CHECK(r.stats.draft_passes == 3);
  CHECK(draft.cached() <= 14);
}

namespace {

// Tokens 0..7 and their text. 7 is EOS.
const std::vector<std::string> kPieces{"a", "b", "c", "d", " ", "aSTOPb", "\xC3", "</s>"};

/// A greedy model that emits `script` after a prompt of `prompt_length` tokens, then "a" forever.
MockLM scripted(std::vector<token_t> script, std::size_t prompt_length) {
  return MockLM(kPieces.size(), 64, [script, prompt_length](std::span<const token_t> prefix) {
    const std::size_t i = prefix.size() - prompt_length;
    return one_hot_logits(kPieces.size(), i < script.size() ? script[i] : 0);
  });
}

struct Run {
  specdec::GenerationResult result;
  std::vector<token_t> event_tokens;
  std::vector<std::string> event_texts;
};

Run run_ar(std::vector<token_t> script, std::vector<std::string> stops, std::size_t budget = 20) {
  const std::vector<token_t> prompt{0, 1};
  MockLM model = scripted(script, prompt.size());
  const MockTokenizer tok(kPieces, 7);
  specdec::AutoregressiveDecoder dec(model, &tok);
  GenerationConfig cfg;
  cfg.sampling.temperature = 0;
  cfg.max_new_tokens = budget;
  cfg.stop_strings = std::move(stops);
  Run run;
  specdec::Callbacks cb;
  cb.on_token = [&](const specdec::TokenEvent& e) {
    run.event_tokens.push_back(e.token);
    run.event_texts.emplace_back(e.text);
  };
  run.result = dec.generate(prompt, cfg, cb);
  return run;
}

}  // namespace

TEST_CASE("stop strings: held back while they may complete, cut when they do", "[decoder]") {
  // "cd" completes at d: the text stops before it; the token that completed it is kept.
  Run r = run_ar({0, 1, 2, 3, 0}, {"cd"});
  CHECK(r.result.stop_reason == StopReason::stop_string);
  CHECK(r.result.tokens == std::vector<token_t>{0, 1, 2, 3});
  CHECK(r.result.text == "ab");
  CHECK(r.event_texts == std::vector<std::string>{"a", "b", "", ""});

  // "cx" never completes: the held "c" is released with the next piece.
  r = run_ar({0, 2, 3}, {"cx"}, 3);
  CHECK(r.result.stop_reason == StopReason::max_tokens);
  CHECK(r.result.text == "acd");
  CHECK(r.event_texts == std::vector<std::string>{"a", "", "cd"});

  // Held text at the end of the generation comes out in a final event with token -1.
  r = run_ar({0, 1, 3}, {"dz"}, 3);
  CHECK(r.result.text == "abd");
  CHECK(r.event_tokens == std::vector<token_t>{0, 1, 3, -1});
  CHECK(r.event_texts == std::vector<std::string>{"a", "b", "", "d"});

  // A stop string inside one token's piece; the earliest of several stop strings wins.
  r = run_ar({1, 5, 0}, {"Pb", "ST"});
  CHECK(r.result.text == "ba");
  CHECK(r.result.tokens == std::vector<token_t>{1, 5});

  // EOS ends the generation without being emitted or streamed.
  r = run_ar({1, 7, 0}, {});
  CHECK(r.result.stop_reason == StopReason::eos);
  CHECK(r.result.tokens == std::vector<token_t>{1});
  CHECK(r.result.text == "b");

  CHECK_THROWS_AS(run_ar({0}, {""}), specdec::Error);
}

TEST_CASE("speculative decoding stops at the same token as the baseline", "[decoder]") {
  // The draft proposes the script exactly, so a whole round is accepted; the stop string and
  // EOS fall inside it.
  const std::vector<token_t> script{0, 1, 2, 3, 0, 1, 7, 2};
  const std::vector<token_t> prompt{0, 1};
  const MockTokenizer tok(kPieces, 7);
  for (const auto& stops : {std::vector<std::string>{"cd"}, std::vector<std::string>{}}) {
    MockLM target = scripted(script, prompt.size());
    MockLM draft = scripted(script, prompt.size());
    specdec::SpeculativeDecoder dec(draft, target, specdec::SpeculativeOptions{.k = 8}, &tok, &tok);
    GenerationConfig cfg;
    cfg.sampling.temperature = 0;
    cfg.stop_strings = stops;
    std::string streamed;
    specdec::Callbacks cb;
    cb.on_token = [&](const specdec::TokenEvent& e) { streamed += e.text; };
    const auto r = dec.generate(prompt, cfg, cb);
    const Run base = run_ar(script, stops);
    CHECK(r.tokens == base.result.tokens);
    CHECK(r.text == base.result.text);
    CHECK(r.stop_reason == base.result.stop_reason);
    CHECK(streamed == r.text);
  }
}

TEST_CASE("stop tokens end the generation like EOS, also inside an accepted draft", "[decoder]") {
  // Token 3 ("d") as an end-of-turn token: the generation stops before it, as at EOS, for the
  // baseline and for a speculative round that accepted it (and even with stop_at_eos off).
  const std::vector<token_t> script{0, 1, 2, 3, 0, 1};
  const std::vector<token_t> prompt{0, 1};
  const MockTokenizer tok(kPieces, 7);
  for (const bool stop_at_eos : {true, false}) {
    GenerationConfig cfg;
    cfg.sampling.temperature = 0;
    cfg.stop_tokens = {5, 3};
    cfg.stop_at_eos = stop_at_eos;
    MockLM plain_model = scripted(script, prompt.size());
    specdec::AutoregressiveDecoder plain(plain_model, &tok);
    const auto base = plain.generate(prompt, cfg);
    CHECK(base.tokens == std::vector<token_t>{0, 1, 2});
    CHECK(base.text == "abc");
    CHECK(base.stop_reason == StopReason::eos);
    MockLM target = scripted(script, prompt.size()), draft = scripted(script, prompt.size());
    specdec::SpeculativeDecoder dec(draft, target, specdec::SpeculativeOptions{.k = 6}, &tok, &tok);
    const auto r = dec.generate(prompt, cfg);
    CHECK(r.tokens == base.tokens);
    CHECK(r.stop_reason == StopReason::eos);
    CHECK(target.cached() == prompt.size() + 3);  // rolled back to the sequence
  }
}

TEST_CASE("statistics: every field is named and the derived ones add up", "[decoder]") {
  const Run r = run_ar({0, 1, 2, 3}, {}, 4);
  const auto& s = r.result.stats;
  std::vector<std::string> names;
  s.for_each_field([&](std::string_view name, auto) { names.emplace_back(name); });
  CHECK(names.size() == 17);
  CHECK(std::find(names.begin(), names.end(), "acceptance_rate") != names.end());
  CHECK(std::find(names.begin(), names.end(), "tokens_per_second") != names.end());
  CHECK(std::find(names.begin(), names.end(), "target_passes") != names.end());
  CHECK(s.tokens_emitted == 4);
  CHECK(s.target_passes == 4);
  CHECK(s.prompt_tokens == 2);
  CHECK(s.decode_seconds >= s.verify_seconds + s.sampling_seconds);
  CHECK(s.other_seconds ==
        Approx(s.decode_seconds - s.verify_seconds - s.sampling_seconds - s.draft_seconds)
            .margin(1e-12));
  CHECK(s.tokens_per_second > 0);
  CHECK(specdec::to_string(StopReason::context_full) == "context_full");
}
