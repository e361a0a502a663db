// The subcommands behave as documented, checked against in-process references: generate --json
// (shape and consistency of the statistics), greedy speculative == --baseline == a plain argmax
// loop over the CPU backend, logits == the CPU forward byte for byte, info lists every tensor,
// bench and demo run and report exactness.

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::token_t;
using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::run_cli;

namespace {

const char* const kPrompt =
    "def copy(x):\n    \"\"\"Shallow copy operation on arbitrary Python objects.\"\"\"\n";

const specdec::LoadedModel& target_file() {
  static const specdec::LoadedModel m = specdec::load_model(demo_target());
  return m;
}

/// Greedy decoding written out directly: feed the prompt, take the argmax, feed it, repeat.
std::vector<token_t> reference_greedy(const std::string& prompt, std::size_t n) {
  specdec::cpu::Transformer lm(target_file());
  std::vector<token_t> ids = target_file().tokenizer->encode(prompt, true);
  specdec::LogitsView logits = lm.forward(ids);
  std::vector<token_t> out;
  for (std::size_t i = 0; i < n; ++i) {
    const auto next =
        static_cast<token_t>(specdec::sampling::argmax<float>(logits.row(logits.rows - 1)));
    out.push_back(next);
    logits = lm.forward(std::span<const token_t>(&out.back(), 1));
  }
  return out;
}

nlohmann::json generate_json(std::vector<std::string> extra) {
  std::vector<std::string> args = {"generate", "--target", demo_target(),
                                   "--prompt", kPrompt,    "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return specdec::test::parse_json_output(r);
}

}  // namespace

TEST_CASE("generate --json prints tokens, text and consistent statistics", "[cli]") {
  const nlohmann::json j =
      generate_json({"--draft", demo_draft(), "-n", "24", "--temp", "0.8", "--seed", "7"});
  REQUIRE(j.contains("tokens"));
  REQUIRE(j.contains("text"));
  REQUIRE(j.contains("stats"));
  const auto tokens = j["tokens"].get<std::vector<token_t>>();
  CHECK(tokens.size() == 24);
  CHECK(j["stop_reason"] == "max_tokens");
  CHECK(j["mode"] == "speculative");

  // The text is the detokenized continuation: decode(prompt + tokens) = decode(prompt) + text.
  const auto& tok = *target_file().tokenizer;
  const auto prompt = j["prompt_tokens"].get<std::vector<token_t>>();
  CHECK(prompt == tok.encode(kPrompt, true));
  std::vector<token_t> all = prompt;
  all.insert(all.end(), tokens.begin(), tokens.end());
  CHECK(tok.decode(all) == tok.decode(prompt) + j["text"].get<std::string>());

  const auto& s = j["stats"];
  for (const char* key :
       {"tokens_emitted", "rounds", "target_passes", "draft_passes", "drafted", "accepted",
        "acceptance_rate", "mean_tokens_per_round", "accepted_histogram", "prefill_seconds",
        "draft_seconds", "verify_seconds", "sampling_seconds", "other_seconds", "decode_seconds",
        "tokens_per_second"}) {
    INFO(key);
    CHECK(s.contains(key));
  }
  CHECK(s["tokens_emitted"] == tokens.size());
  CHECK(s["target_passes"] == s["rounds"]);  // one verify per round
  const double drafted = s["drafted"], accepted = s["accepted"];
  CHECK(accepted <= drafted);
  CHECK(s["acceptance_rate"].get<double>() == Approx(accepted / drafted));
  CHECK(s["tokens_per_second"].get<double>() > 0);
  CHECK(s["tokens_per_second"].get<double>() ==
        Approx(tokens.size() / s["decode_seconds"].get<double>()));

  // The rounds account for every token: each emits its accepted drafts plus one token.
  std::size_t emitted = 0, accepted_sum = 0;
  for (const auto& r : j["rounds"]) {
    CHECK(r["emitted"].get<std::size_t>() <= r["accepted"].get<std::size_t>() + 1);
    emitted += r["emitted"].get<std::size_t>();
    accepted_sum += r["accepted"].get<std::size_t>();
  }
  CHECK(j["rounds"].size() == s["rounds"].get<std::size_t>());
  CHECK(emitted == tokens.size());
  CHECK(accepted_sum == s["accepted"].get<std::size_t>());
}

TEST_CASE("greedy: speculative tokens == --baseline tokens == a plain argmax loop", "[cli]") {
  constexpr std::size_t kTokens = 40;
  const auto reference = reference_greedy(kPrompt, kTokens);
  const auto tokens_of = [](const nlohmann::json& j) {
    return j["tokens"].get<std::vector<token_t>>();
  };
  const std::vector<std::string> greedy = {"-n", std::to_string(kTokens), "--temp", "0"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), greedy.begin(), greedy.end());
    return extra;
  };
  CHECK(tokens_of(generate_json(with({"--baseline"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--draft", demo_draft(), "-k", "1"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--draft", demo_draft(), "-k", "4"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--draft", demo_draft(), "--adaptive"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--ngram", "3", "-k", "8"}))) == reference);
  // A temperature too small for float arithmetic (1e-39 made the weights NaN) decodes greedily,
  // the limit it approaches; so does the smallest positive float.
  for (const std::string tiny : {"1e-39", "1e-45"}) {
    const std::vector<std::string> cold = {"-n", std::to_string(kTokens), "--temp", tiny};
    const auto with_cold = [&](std::vector<std::string> extra) {
      extra.insert(extra.end(), cold.begin(), cold.end());
      return extra;
    };
    CHECK(tokens_of(generate_json(with_cold({"--baseline"}))) == reference);
    CHECK(tokens_of(generate_json(with_cold({"--draft", demo_draft()}))) == reference);
  }
}

// With penalties and a logit bias, greedy speculative decoding still equals greedy target-only
// decoding, and both equal the argmax loop over the penalised rows (llama.cpp's window: the last
// --repeat-last-n tokens of prompt + output).
TEST_CASE("greedy with penalties and logit bias: speculative == --baseline == the penalised loop",
          "[cli]") {
  constexpr std::size_t kTokens = 40;
  specdec::sampling::Penalties pen;
  pen.repeat = 1.3f;
  pen.last_n = 16;
  pen.presence = 0.5f;
  pen.frequency = 0.25f;
  pen.logit_bias = {{13, 2.0f}, {100, -std::numeric_limits<float>::infinity()}};
  // The reference loop.
  specdec::cpu::Transformer lm(target_file());
  std::vector<token_t> seq = target_file().tokenizer->encode(kPrompt, true);
  specdec::LogitsView logits = lm.forward(seq);
  std::vector<token_t> reference;
  for (std::size_t i = 0; i < kTokens; ++i) {
    const auto row = specdec::sampling::apply_penalties(pen, seq, logits.row(logits.rows - 1));
    reference.push_back(static_cast<token_t>(specdec::sampling::argmax<float>(row)));
    seq.push_back(reference.back());
    logits = lm.forward(std::span<const token_t>(&reference.back(), 1));
  }
  CHECK(reference != reference_greedy(kPrompt, kTokens));  // the penalties change the text
  const auto tokens_of = [](const nlohmann::json& j) {
    return j["tokens"].get<std::vector<token_t>>();
  };
  const std::vector<std::string> flags = {"-n",
                                          std::to_string(kTokens),
                                          "--temp",
                                          "0",
                                          "--repeat-penalty",
                                          "1.3",
                                          "--repeat-last-n",
                                          "16",
                                          "--presence-penalty",
                                          "0.5",
                                          "--frequency-penalty",
                                          "0.25",
                                          "-l",
                                          "13+2",
                                          "--logit-bias",
                                          "100-inf"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), flags.begin(), flags.end());
    return extra;
  };
  const nlohmann::json baseline = generate_json(with({"--baseline"}));
  CHECK(tokens_of(baseline) == reference);
  CHECK(baseline["repeat_penalty"] == 1.3);
  CHECK(baseline["logit_bias"] == nlohmann::json::parse("[[13, 2.0], [100, null]]"));
  CHECK(tokens_of(generate_json(with({"--draft", demo_draft(), "-k", "1"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--draft", demo_draft(), "-k", "5"}))) == reference);
  CHECK(tokens_of(generate_json(with({"--ngram", "3", "-k", "8"}))) == reference);
}

TEST_CASE("generate streams plain text to stdout and statistics to stderr", "[cli]") {
  const nlohmann::json j = generate_json({"--baseline", "-n", "16", "--temp", "0"});
  const std::string text = j["text"].get<std::string>();
  // As llama.cpp: the prompt first, then the generated text (no colour codes: not a terminal).
  const auto r = run_cli({"generate", "-m", demo_target(), "-md", demo_draft(), "-p", kPrompt, "-n",
                          "16", "--temp", "0"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out == kPrompt + text + "\n");
  CHECK(r.err.find("acceptance") != std::string::npos);
  CHECK(specdec::test::count_lines(r.err) == 1);  // the stats line only
  // --no-display-prompt: the generated text alone.
  const auto plain = run_cli({"generate", "-m", demo_target(), "-md", demo_draft(), "-p", kPrompt,
                              "-n", "16", "--temp", "0", "--no-display-prompt"});
  REQUIRE(plain.status == 0);
  CHECK(plain.out == text + "\n");
}

TEST_CASE("logits writes n x vocab float32 equal to the CPU forward", "[cli]") {
  const std::vector<token_t> valid = {1, 822, 3509, 2989, 13, 4000, 3, 4095};
  const auto file = specdec::test::temp_path(".f32");
  const auto r = run_cli({"logits", "--model", demo_target(), "--tokens",
                          "1,822,3509,2989,13,4000,3,4095", "--out", file.string()});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string bytes = specdec::test::read_file(file);
  std::filesystem::remove(file);

  specdec::cpu::Transformer lm(target_file());
  const specdec::LogitsView logits = lm.forward(valid);
  REQUIRE(bytes.size() == valid.size() * lm.vocab_size() * sizeof(float));
  CHECK(std::memcmp(bytes.data(), logits.data, bytes.size()) == 0);
}

TEST_CASE("info prints the tensor table of a model", "[cli]") {
  const auto r = run_cli({"info", demo_target()});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const specdec::GgufFile gguf = specdec::read_gguf(demo_target());
  for (const auto& t : gguf.tensors) {
    INFO(t.name);
    CHECK(r.out.find(t.name) != std::string::npos);
  }
  CHECK(r.out.find("Q8_0") != std::string::npos);
  CHECK(r.out.find("llama") != std::string::npos);
}

TEST_CASE("bench runs baseline and speculative configurations and checks greedy exactness",
          "[cli]") {
  const auto r = run_cli(
      {"bench",       "--target",
       demo_target(), "--draft",
       demo_draft(),  "--ngram",
       "3",           "-k",
       "2,4",         "--adaptive",
       "--temp",      "0,0.8",
       "-n",          "12",
       "--limit",     "1",
       "--repeat",    "1",
       "--prompts",   (std::filesystem::path(SPECDEC_DEMO_MODELS) / "eval-prompts.jsonl").string(),
       "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto j = specdec::test::parse_json_output(r);
  // 2 temperatures x (code, prose, all) x (baseline + 2 drafters x (2 k + adaptive)).
  CHECK(j["results"].size() == 2 * 3 * 7);
  // Greedy: 2 prompts x 6 speculative configurations, each compared with the baseline.
  CHECK(j["greedy_runs_compared"] == 12);
  CHECK(j["greedy_runs_identical"] == 12);
  for (const auto& row : j["results"]) {
    CHECK(row["tokens"].get<std::size_t>() > 0);
    if (row["drafter"] == "none") CHECK(row["speedup"].get<double>() == 1.0);
  }
}

TEST_CASE("demo runs on the bundled models with no arguments", "[cli]") {
  const auto r = run_cli({"demo", "-n", "12", "--repeat", "1"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("speedup") != std::string::npos);
  CHECK(r.out.find("--- code ---") != std::string::npos);
  CHECK(r.out.find("--- prose ---") != std::string::npos);
  CHECK(r.out.find(" NO") == std::string::npos);

  const auto r2 =
      run_cli({"demo", "-n", "4", "--repeat", "1", "--models-dir", SPECDEC_DEMO_MODELS});
  CHECK(r2.status == 0);
}

TEST_CASE("bench of a target without prompts runs the built-in general prompts and says so",
          "[cli]") {
  // The demo models seen from a folder without eval-prompts.jsonl, as a user's own files are.
  const auto dir = specdec::test::temp_path("");
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink(std::filesystem::absolute(demo_target()), dir / "t.gguf");
  std::filesystem::create_symlink(std::filesystem::absolute(demo_draft()), dir / "d.gguf");
  const auto r =
      run_cli({"bench", "-m", (dir / "t.gguf").string(), "-md", (dir / "d.gguf").string(), "-n",
               "4", "--limit", "1", "--repeat", "1", "--temp", "0", "--json"});
  std::filesystem::remove_all(dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("specdec: note: no --prompts: running specdec's 8 built-in general prompts") !=
        std::string::npos);
  const auto j = specdec::test::parse_json_output(r);
  CHECK(j["prompts"] == "built-in");
  CHECK(j["greedy_runs_compared"] == 2);  // --limit 1: one code and one prose prompt
  CHECK(j["greedy_runs_identical"] == 2);
}
