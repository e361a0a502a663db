// The serving engine (specdec/serve/engine.hpp) on scripted mock models, without HTTP: every
// drafter kind of DecodeSetup is served, and a job's tokens are exactly those of the same
// request decoded alone by a session from the library's make_session (batched and unbatched,
// with more jobs than slots so that they queue); admission (a full queue, a draining engine),
// cancellation of a queued and of a running job, the metrics' counts, and the refusals of
// make_engine (no draft model for a setup that needs one, a draft with another vocabulary).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mock_lm.hpp"
#include "specdec/decoder/setup.hpp"
#include "specdec/serve/engine.hpp"

using namespace specdec;
using specdec::test::Markov;
using specdec::test::MockLM;
using specdec::test::MockTokenizer;

namespace {

/// The vocabulary of the Markov models (V = 6).
MockTokenizer six_tokens() { return MockTokenizer({"a", "b", "c", "d", "e", "f"}); }

/// A target and a draft that disagree often, both order-2 Markov models over V = 6.
struct Pair {
  Markov target{11}, draft{12};
  MockTokenizer tokenizer = six_tokens(), draft_tokenizer = six_tokens();

  serve::SlotModels<MockLM> slot_models(std::size_t context = 96) const {
    serve::SlotModels<MockLM> m;
    m.make_target = [this, context] { return std::make_unique<MockLM>(target.lm(context)); };
    m.make_draft = [this, context] { return std::make_unique<MockLM>(draft.lm(context)); };
    m.tokenizer = &tokenizer;
    m.draft_tokenizer = &draft_tokenizer;
    return m;
  }
};

struct Request {
  std::vector<token_t> prompt;
  GenerationConfig config;
};

/// Greedy and sampled requests of different lengths, seeds and prompts.
std::vector<Request> requests(std::size_t count) {
  std::vector<Request> out;
  for (std::size_t b = 0; b < count; ++b) {
    Request r;
    r.prompt = {1, static_cast<token_t>(b % 6), 2, static_cast<token_t>((b * 5) % 6)};
    r.config.max_new_tokens = 8 + 3 * b;
    r.config.sampling.temperature = b % 2 == 0 ? 0.0f : 0.8f;
    r.config.seed = 100 + b;
    r.config.stop_at_eos = false;
    out.push_back(r);
  }
  return out;
}

/// The request decoded alone by a session of the setup (the reference).
std::vector<token_t> alone(const Pair& pair, const DecodeSetup& setup, const Request& r) {
  MockLM target = pair.target.lm(96), draft = pair.draft.lm(96);
  return with_session_type<MockLM>(setup.drafter, [&]<class S>(std::type_identity<S>) {
    auto owned = make_session<S>(
        setup, SessionModels<MockLM>{&target, &draft, &pair.tokenizer, &pair.draft_tokenizer});
    owned->session().start(r.prompt, r.config);
    return owned->session().run().tokens;
  });
}

DecodeSetup setup_of(DecodeSetup::Drafter drafter) {
  DecodeSetup setup;
  setup.drafter = drafter;
  setup.k = 3;
  setup.ngram = 2;
  setup.ngram_min = 1;
  return setup;
}

}  // namespace

TEST_CASE("the engine serves every drafter kind with the tokens of a session alone",
          "[serve][engine]") {
  const Pair pair;
  const auto drafter =
      GENERATE(DecodeSetup::Drafter::none, DecodeSetup::Drafter::model, DecodeSetup::Drafter::ngram,
               DecodeSetup::Drafter::lookup_model, DecodeSetup::Drafter::model_tree);
  const bool batching = GENERATE(true, false);
  const DecodeSetup setup = setup_of(drafter);
  INFO(setup.label() << (batching ? ", batched" : ", one round per slot"));

  serve::Metrics metrics(2, 8);
  const auto engine = serve::make_engine(pair.slot_models(), setup, {2, 8, batching}, metrics);
  const std::vector<Request> reqs = requests(5);  // more than the slots: some wait in the queue
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (const Request& r : reqs) {
    jobs.push_back(std::make_shared<serve::Job>(r.prompt, r.config));
    REQUIRE(engine->submit(jobs.back()) == serve::Engine::Admission::accepted);
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    jobs[i]->wait_finished();
    INFO("request " << i);
    CHECK(jobs[i]->error().empty());
    CHECK(jobs[i]->result().tokens == alone(pair, setup, reqs[i]));
    // Greedy: every drafter gives the target-only tokens (so the reference is not just the
    // engine's own factory agreeing with itself).
    if (reqs[i].config.sampling.temperature == 0.0f)
      CHECK(jobs[i]->result().tokens == alone(pair, setup_of(DecodeSetup::Drafter::none), reqs[i]));
    CHECK(jobs[i]->result().stop_reason == StopReason::max_tokens);
  }
  engine->drain();
  engine->join();
  const std::string exposition = metrics.render();
  CHECK_THAT(exposition, Catch::Contains("specdec_requests_total{finish_reason=\"length\"} 5"));
  CHECK(engine->load().busy == 0);
  CHECK(engine->load().draining);
}

TEST_CASE("the engine's admission, cancellation and draining", "[serve][engine]") {
  // A target that waits at its first row until released: the first job holds the only slot.
  std::atomic<bool> released{false};
  const Markov markov(3);
  const MockTokenizer tokenizer = six_tokens();
  serve::SlotModels<MockLM> models;
  models.make_target = [&] {
    MockLM base = markov.lm(96);
    return std::make_unique<MockLM>(6, 96, [&, base](std::span<const token_t> prefix) {
      while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return base.logits_of(prefix);
    });
  };
  models.tokenizer = &tokenizer;
  serve::Metrics metrics(1, 1);
  const auto engine =
      serve::make_engine(models, setup_of(DecodeSetup::Drafter::none), {1, 1, true}, metrics);
  const Request r = requests(1).front();
  const auto running = std::make_shared<serve::Job>(r.prompt, r.config);
  const auto queued = std::make_shared<serve::Job>(r.prompt, r.config);
  const auto refused = std::make_shared<serve::Job>(r.prompt, r.config);
  REQUIRE(engine->submit(running) == serve::Engine::Admission::accepted);
  REQUIRE(engine->submit(queued) == serve::Engine::Admission::accepted);
  // One slot and a queue of one are taken.
  CHECK(engine->submit(refused) == serve::Engine::Admission::queue_full);

  queued->cancel();
  running->cancel();
  released.store(true);
  running->wait_finished();
  queued->wait_finished();
  CHECK(running->result().stop_reason == StopReason::cancelled);
  CHECK(queued->result().stop_reason == StopReason::cancelled);

  engine->drain();
  CHECK(engine->submit(refused) == serve::Engine::Admission::draining);
  engine->join();
  CHECK(engine->load().busy == 0);
  CHECK(engine->load().queued == 0);
}

TEST_CASE("make_engine refuses a setup it cannot serve", "[serve][engine]") {
  const Pair pair;
  serve::Metrics metrics(1, 1);
  serve::SlotModels<MockLM> no_draft = pair.slot_models();
  no_draft.make_draft = nullptr;
  CHECK_THROWS_WITH(
      serve::make_engine(no_draft, setup_of(DecodeSetup::Drafter::model), {1, 1, true}, metrics),
      Catch::Contains("needs a draft model"));

  // The library's vocabulary check: a draft whose tokenizer has another piece for token 3.
  const MockTokenizer other({"a", "b", "c", "X", "e", "f"});
  serve::SlotModels<MockLM> mismatched = pair.slot_models();
  mismatched.draft_tokenizer = &other;
  for (const auto drafter : {DecodeSetup::Drafter::model, DecodeSetup::Drafter::lookup_model})
    CHECK_THROWS_WITH(serve::make_engine(mismatched, setup_of(drafter), {1, 1, true}, metrics),
                      Catch::Contains("tokenizers differ at token 3"));
  // Without a draft model the draft tokenizer is not compared.
  CHECK_NOTHROW(
      serve::make_engine(mismatched, setup_of(DecodeSetup::Drafter::ngram), {1, 1, true}, metrics));
}

// Issue 21: suffix decoding in the server. Every slot's drafter also looks up an index of the
// earlier responses of all slots (SharedSuffixIndex, locked), and each round verifies a token
// tree. Greedy requests must give the target-only tokens whatever the other slots did and
// whether the rounds are batched; a request repeating an earlier prompt is drafted from the
// earlier response (its trees are accepted). The same with the draft model's trees behind the
// suffix drafter (suffix_model).
TEST_CASE("the engine serves suffix trees, sharing earlier responses across slots",
          "[serve][engine]") {
  const Pair pair;
  const bool batching = GENERATE(true, false);
  const auto drafter = GENERATE(DecodeSetup::Drafter::suffix, DecodeSetup::Drafter::suffix_model);
  DecodeSetup setup = setup_of(drafter);
  setup.tree_nodes = 6;
  setup.suffix_shape.min_score = 0.0f;
  INFO(setup.label() << (batching ? ", batched" : ", one round per slot"));
  serve::Metrics metrics(3, 16);
  const auto engine = serve::make_engine(pair.slot_models(), setup, {3, 16, batching}, metrics);
  std::vector<Request> reqs = requests(6);
  for (Request& r : reqs) {
    r.config.sampling.temperature = 0.0f;
    r.config.max_new_tokens = 24;
  }
  const auto run_all = [&](const std::vector<Request>& batch) {
    std::vector<std::shared_ptr<serve::Job>> jobs;
    for (const Request& r : batch) {
      jobs.push_back(std::make_shared<serve::Job>(r.prompt, r.config));
      REQUIRE(engine->submit(jobs.back()) == serve::Engine::Admission::accepted);
    }
    for (auto& job : jobs) job->wait_finished();
    return jobs;
  };
  const auto first = run_all(reqs);
  const auto second = run_all(reqs);  // the same requests again: their responses are indexed
  std::size_t accepted_first = 0, accepted_second = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    const auto want = alone(pair, setup_of(DecodeSetup::Drafter::none), reqs[i]);
    REQUIRE(first[i]->error().empty());
    REQUIRE(second[i]->error().empty());
    CHECK(first[i]->result().tokens == want);
    CHECK(second[i]->result().tokens == want);
    accepted_first += first[i]->result().stats.accepted;
    accepted_second += second[i]->result().stats.accepted;
  }
  CHECK(accepted_second > accepted_first);
  engine->drain();
  engine->join();
}
