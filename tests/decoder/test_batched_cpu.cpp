// BatchedRounds on the CPU backend with the bundled demo pair (models/): the draft steps and the
// target verifications of several sequences run as one cpu::Transformer::forward_batch each, and
// every sequence still gets exactly the tokens and text that generate() gives it alone — greedy
// and sampled with seeds, with the draft model, n-gram lookup, suffix trees and draft model
// trees (tree rounds join the batched target forward), sequences joining while others run. This is
// the exactness a server's concurrent requests rely on.

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/batched.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

using specdec::BatchedRounds;
using specdec::GenerationConfig;
using specdec::GenerationResult;
using specdec::SpeculativeOptions;
using specdec::SpeculativeSession;
using specdec::token_t;
using specdec::cpu::Transformer;

namespace {

const std::filesystem::path kModels = SPECDEC_DEMO_MODELS;

std::vector<std::string> eval_prompts(std::size_t count) {
  std::ifstream in(kModels / "eval-prompts.jsonl");
  std::vector<std::string> out;
  for (std::string line; out.size() < count && std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  REQUIRE(out.size() == count);
  return out;
}

struct Demo {
  specdec::LoadedModel target = specdec::load_model((kModels / "target-q8_0.gguf").string());
  specdec::LoadedModel draft = specdec::load_model((kModels / "draft-q8_0.gguf").string());
};

/// One sequence's models: a target and a draft Transformer over the shared weights.
struct Slot {
  Slot(const Demo& demo)
      : target(demo.target, {.threads = 2, .context_length = 512}),
        draft(demo.draft, {.threads = 2, .context_length = 512}) {}
  Transformer target, draft;
  specdec::NGramDrafter ngram;
  specdec::SuffixDrafter suffix;
  specdec::ModelTreeDrafter<Transformer> trees{draft};
};

GenerationConfig config_for(std::size_t b) {
  GenerationConfig cfg;
  cfg.max_new_tokens = 24 + 7 * b;
  cfg.sampling.temperature = b % 2 == 0 ? 0.0f : 0.8f;
  cfg.sampling.top_p = b == 3 ? 0.9f : 1.0f;
  cfg.seed = 7 + b;
  cfg.stop_strings = {b == 1 ? "\n\n" : "<<never>>"};
  return cfg;
}

template <class Session, class Make>
void compare(const Demo& demo, Make&& make) {
  constexpr std::size_t kSequences = 4;
  const std::vector<std::string> texts = eval_prompts(kSequences);
  const specdec::Tokenizer& tok = *demo.target.tokenizer;
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<GenerationResult> alone;
  for (std::size_t b = 0; b < kSequences; ++b) {
    slots.push_back(std::make_unique<Slot>(demo));
    auto session = make(*slots.back());
    session->start(tok.encode(texts[b], true), config_for(b));
    alone.push_back(session->run());
  }
  std::vector<std::unique_ptr<Session>> sessions;
  for (std::size_t b = 0; b < kSequences; ++b) {
    slots[b] = std::make_unique<Slot>(demo);  // fresh caches
    sessions.push_back(make(*slots[b]));
  }
  BatchedRounds<Session> rounds;
  std::size_t batched_rounds = 0;
  for (std::size_t round = 0; round < 500; ++round) {
    std::vector<Session*> active;
    for (std::size_t b = 0; b < kSequences; ++b) {
      if (round == 3 * b) sessions[b]->start(tok.encode(texts[b], true), config_for(b));
      if (round >= 3 * b && !sessions[b]->done()) active.push_back(sessions[b].get());
    }
    if (active.empty() && round > 3 * kSequences) break;
    const specdec::BatchedRound report = rounds.round(active);
    REQUIRE(report.failures.empty());
    batched_rounds += report.sequences > 1;
  }
  CHECK(batched_rounds > 5);
  for (std::size_t b = 0; b < kSequences; ++b) {
    INFO("sequence " << b << ": " << texts[b]);
    REQUIRE(sessions[b]->done());
    CHECK(sessions[b]->result().tokens == alone[b].tokens);
    CHECK(sessions[b]->result().text == alone[b].text);
    CHECK(sessions[b]->result().stop_reason == alone[b].stop_reason);
    CHECK(sessions[b]->result().stats.accepted == alone[b].stats.accepted);
  }
}

}  // namespace

TEST_CASE("BatchedRounds on the CPU backend: every sequence gets its tokens alone",
          "[decoder][batched]") {
  const Demo demo;
  SECTION("draft model") {
    using Session = SpeculativeSession<Transformer, Transformer>;
    compare<Session>(demo, [&](Slot& s) {
      return std::make_unique<Session>(s.draft, s.target, SpeculativeOptions{.k = 4},
                                       demo.target.tokenizer.get(), demo.draft.tokenizer.get());
    });
  }
  SECTION("draft model, adaptive k") {
    using Session = SpeculativeSession<Transformer, Transformer>;
    compare<Session>(demo, [&](Slot& s) {
      return std::make_unique<Session>(s.draft, s.target,
                                       SpeculativeOptions{.k = 4, .adaptive = true},
                                       demo.target.tokenizer.get(), demo.draft.tokenizer.get());
    });
  }
  SECTION("n-gram lookup") {
    using Session = SpeculativeSession<specdec::NGramDrafter, Transformer>;
    compare<Session>(demo, [&](Slot& s) {
      return std::make_unique<Session>(s.ngram, s.target, SpeculativeOptions{.k = 4},
                                       demo.target.tokenizer.get());
    });
  }
  // Token trees: each tree round's forward_tree joins the others' in one forward_batch.
  SECTION("suffix trees") {
    using Session = SpeculativeSession<specdec::SuffixDrafter, Transformer>;
    compare<Session>(demo, [&](Slot& s) {
      return std::make_unique<Session>(s.suffix, s.target, SpeculativeOptions{.max_tree_nodes = 8},
                                       demo.target.tokenizer.get());
    });
  }
  SECTION("draft model trees") {
    using Session = SpeculativeSession<specdec::ModelTreeDrafter<Transformer>, Transformer>;
    compare<Session>(demo, [&](Slot& s) {
      return std::make_unique<Session>(s.trees, s.target, SpeculativeOptions{.max_tree_nodes = 6},
                                       demo.target.tokenizer.get(), demo.draft.tokenizer.get());
    });
  }
}
