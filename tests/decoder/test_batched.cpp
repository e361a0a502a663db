// BatchedRounds with scripted mock models: several sequences driven round by round together get
// exactly the tokens (and statistics) each gets alone from generate(), with model drafters
// (fixed and adaptive k, draft steps batched across sequences), the n-gram drafter and plain
// target steps; sequences join while others are mid-way and stop at different rounds; a
// sequence whose round throws is cancelled and reported while the others go on. The same with
// the CPU backend's real batched forward is tests/decoder/test_batched_cpu.cpp.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/batched.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec_test.hpp"

using specdec::BatchedRounds;
using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::SpeculativeDecoder;
using specdec::SpeculativeOptions;
using specdec::SpeculativeSession;
using specdec::token_t;
using specdec::test::MockLM;

namespace {

/// An order-2 Markov model over V = 6 with position dependence (random logits from `seed`).
struct Markov {
  std::vector<float> table;
  explicit Markov(std::uint32_t seed) : table(6 * 6 * 3 * 6) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (auto& x : table) x = dist(gen);
  }
  /// The model; its row at prefix length `bad_at` has a NaN (0: never).
  [[nodiscard]] MockLM lm(std::size_t bad_at = 0) const {
    return MockLM(6, 64, [this, bad_at](std::span<const token_t> prefix) {
      const auto a = static_cast<std::size_t>(prefix.back());
      const auto b = prefix.size() > 1 ? static_cast<std::size_t>(prefix[prefix.size() - 2]) : 0;
      const std::size_t offset = ((a * 6 + b) * 3 + prefix.size() % 3) * 6;
      std::vector<float> row(table.begin() + static_cast<std::ptrdiff_t>(offset),
                             table.begin() + static_cast<std::ptrdiff_t>(offset + 6));
      if (prefix.size() == bad_at) row[1] = std::numeric_limits<float>::quiet_NaN();
      return row;
    });
  }
};

struct Request {
  std::vector<token_t> prompt;
  GenerationConfig config;
  std::size_t joins_at_round = 0;
};

/// Six requests: greedy and sampled, different budgets, seeds and prompts; three join late.
std::vector<Request> requests() {
  std::vector<Request> out;
  for (std::size_t b = 0; b < 6; ++b) {
    Request r;
    r.prompt = {1, static_cast<token_t>(b % 6), 2, static_cast<token_t>((b * 5) % 6)};
    r.config.max_new_tokens = 9 + 4 * b;
    r.config.sampling.temperature = b % 3 == 0 ? 0.0f : 0.6f + 0.2f * static_cast<float>(b % 3);
    r.config.sampling.top_k = b == 4 ? 4 : 0;
    r.config.seed = 100 + b;
    r.config.stop_at_eos = false;
    r.config.record_rounds = true;
    r.joins_at_round = b < 3 ? 0 : 2 * b - 4;
    out.push_back(r);
  }
  return out;
}

void check_same(const GenerationResult& batched, const GenerationResult& alone) {
  CHECK(batched.tokens == alone.tokens);
  CHECK(batched.stop_reason == alone.stop_reason);
  CHECK(batched.stats.rounds == alone.stats.rounds);
  CHECK(batched.stats.drafted == alone.stats.drafted);
  CHECK(batched.stats.accepted == alone.stats.accepted);
  CHECK(batched.stats.draft_passes == alone.stats.draft_passes);
  REQUIRE(batched.rounds.size() == alone.rounds.size());
  for (std::size_t r = 0; r < alone.rounds.size(); ++r) {
    CHECK(batched.rounds[r].drafted == alone.rounds[r].drafted);
    CHECK(batched.rounds[r].p_drafted == alone.rounds[r].p_drafted);
    CHECK(batched.rounds[r].q_drafted == alone.rounds[r].q_drafted);
  }
}

/// Runs the requests through BatchedRounds (each joining at its round) and checks every result
/// against generate() alone. make_session(models, b) builds request b's session.
template <class Session, class Models, class Make>
void run_and_compare(const std::vector<Request>& reqs, Make&& make_session) {
  std::vector<std::unique_ptr<Models>> alone_models, batched_models;
  std::vector<GenerationResult> alone;
  for (std::size_t b = 0; b < reqs.size(); ++b) {
    alone_models.push_back(std::make_unique<Models>());
    auto session = make_session(*alone_models.back(), b);
    session->start(reqs[b].prompt, reqs[b].config);
    alone.push_back(session->run());
  }
  std::vector<std::unique_ptr<Session>> sessions;
  for (std::size_t b = 0; b < reqs.size(); ++b) {
    batched_models.push_back(std::make_unique<Models>());
    sessions.push_back(make_session(*batched_models.back(), b));
  }
  BatchedRounds<Session> rounds;
  std::size_t max_batch = 0;
  for (std::size_t round = 0; round < 200; ++round) {
    std::vector<Session*> active;
    for (std::size_t b = 0; b < reqs.size(); ++b) {
      if (reqs[b].joins_at_round == round) sessions[b]->start(reqs[b].prompt, reqs[b].config);
      if (reqs[b].joins_at_round <= round && !sessions[b]->done()) active.push_back(&*sessions[b]);
    }
    if (active.empty() && round > 10) break;
    const specdec::BatchedRound report = rounds.round(active);
    CHECK(report.failures.empty());
    CHECK(report.sequences == active.size());
    max_batch = std::max(max_batch, report.sequences);
  }
  CHECK(max_batch >= 3);  // the schedule really batched several sequences
  for (std::size_t b = 0; b < reqs.size(); ++b) {
    INFO("request " << b);
    REQUIRE(sessions[b]->done());
    check_same(sessions[b]->result(), alone[b]);
  }
}

const Markov p_model(3), q_model(4);

struct Pair {
  MockLM target = p_model.lm(), draft = q_model.lm();
};
struct Single {
  MockLM target = p_model.lm();
  specdec::NGramDrafter ngram{specdec::NGramDrafter::Options{.max_ngram = 2}};
};

}  // namespace

TEST_CASE("BatchedRounds: sequences batched get the tokens each gets alone", "[decoder][batched]") {
  const std::vector<Request> reqs = requests();
  SECTION("draft model, fixed k (draft steps batched)") {
    using Session = SpeculativeSession<MockLM, MockLM>;
    static_assert(Session::kSteppedDraft);
    run_and_compare<Session, Pair>(reqs, [](Pair& m, std::size_t) {
      return std::make_unique<Session>(m.draft, m.target, SpeculativeOptions{.k = 3});
    });
  }
  SECTION("draft model, adaptive k (sequences draft different lengths in one round)") {
    using Session = SpeculativeSession<MockLM, MockLM>;
    run_and_compare<Session, Pair>(reqs, [](Pair& m, std::size_t b) {
      SpeculativeOptions o{.k = 4, .adaptive = true};
      o.adaptive_options.max_k = 2 + b % 4;
      return std::make_unique<Session>(m.draft, m.target, o);
    });
  }
  SECTION("n-gram drafter, --draft-min") {
    using Session = SpeculativeSession<specdec::NGramDrafter, MockLM>;
    static_assert(!Session::kSteppedDraft);
    run_and_compare<Session, Single>(reqs, [](Single& m, std::size_t b) {
      return std::make_unique<Session>(m.ngram, m.target,
                                       SpeculativeOptions{.k = 3, .min_draft = b % 2});
    });
  }
  SECTION("target only (plain steps)") {
    using Session = SpeculativeSession<specdec::NoDrafter, MockLM>;
    run_and_compare<Session, Single>(
        reqs, [](Single& m, std::size_t) { return std::make_unique<Session>(m.target); });
  }
}

TEST_CASE("BatchedRounds: a sequence whose round throws is cancelled, the others go on",
          "[decoder][batched]") {
  using Session = SpeculativeSession<MockLM, MockLM>;
  const std::vector<Request> reqs = requests();
  // Sequence 1's target and sequence 2's draft produce a NaN once the prefix has 8 tokens.
  std::vector<MockLM> targets, drafts;
  for (std::size_t b = 0; b < 3; ++b) {
    targets.push_back(p_model.lm(b == 1 ? 8 : 0));
    drafts.push_back(q_model.lm(b == 2 ? 8 : 0));
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Session*> active;
  for (std::size_t b = 0; b < 3; ++b) {
    sessions.push_back(
        std::make_unique<Session>(drafts[b], targets[b], SpeculativeOptions{.k = 3}));
    GenerationConfig cfg = reqs[b].config;
    cfg.max_new_tokens = 20;
    sessions.back()->start(reqs[b].prompt, cfg);
    active.push_back(sessions.back().get());
  }
  BatchedRounds<Session> rounds;
  std::vector<std::size_t> failed;
  std::vector<std::string> messages;
  while (!sessions[0]->done()) {
    for (const auto& f : rounds.round(active).failures) {
      failed.push_back(f.index);
      try {
        std::rethrow_exception(f.error);
      } catch (const specdec::Error& e) {
        messages.emplace_back(e.what());
      }
    }
  }
  // Each fails once, in the round where its sequence reaches position 7.
  std::sort(failed.begin(), failed.end());
  std::sort(messages.begin(), messages.end());
  CHECK(failed == std::vector<std::size_t>{1, 2});
  CHECK(messages ==
        std::vector<std::string>{"draft model: logits at position 7 contain NaN (token 1)",
                                 "target model: logits at position 7 contain NaN (token 1)"});
  CHECK(sessions[1]->result().stop_reason == specdec::StopReason::cancelled);
  CHECK(sessions[2]->result().stop_reason == specdec::StopReason::cancelled);
  // The healthy sequence is unaffected.
  Pair alone;
  SpeculativeDecoder dec(alone.draft, alone.target, SpeculativeOptions{.k = 3});
  GenerationConfig cfg = reqs[0].config;
  cfg.max_new_tokens = 20;
  check_same(sessions[0]->result(), dec.generate(reqs[0].prompt, cfg));
  // The failed ones were rolled back to their sequences: they can take a next turn.
  for (std::size_t b : {1, 2}) {
    CHECK(targets[b].cached() + 1 == sessions[b]->sequence().size());
    CHECK(drafts[b].cached() <= sessions[b]->sequence().size());
  }
}
