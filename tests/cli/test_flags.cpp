// The flags a llama.cpp user types: each alias does what the flag it stands for does (the same
// JSON output, tokens included, as with specdec's own name), and the llama.cpp-only meanings
// (-n -1, -s -1, -f -, --ignore-eos, --draft-min, -c, --cache-type-k, --color, ...) behave as
// docs/cli.md says.

#include <algorithm>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec/common.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec_test.hpp"

using specdec::token_t;
using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::run_cli;

namespace {

const char* const kPrompt = "1 In the beginning God created the heaven and the earth.\n2 And";

nlohmann::json json_of(const std::vector<std::string>& args,
                       const std::optional<std::string>& input = std::nullopt) {
  std::vector<std::string> a = {"generate"};
  a.insert(a.end(), args.begin(), args.end());
  a.emplace_back("--json");
  const auto r = run_cli(a, input);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return specdec::test::parse_json_output(r);
}

/// The parts of a generate --json output that depend on what was asked, not on timing.
nlohmann::json outcome(nlohmann::json j) {
  j.erase("stats");
  j.erase("target");
  j.erase("draft");
  if (j.contains("rounds"))
    for (auto& r : j["rounds"])
      for (const char* t : {"draft_seconds", "verify_seconds", "sampling_seconds"}) r.erase(t);
  return j;
}

/// The base command in specdec's own names; `flag` (with its value) replaced by `alias`.
std::vector<std::string> base_args() {
  return {"--target",     demo_target(), "--draft", demo_draft(), "--prompt",  kPrompt,
          "--max-tokens", "24",          "--seed",  "5",          "-k",        "3",
          "--temp",       "0.8",         "--stop",  "LORD",       "--threads", "1"};
}
std::vector<std::string> with_alias(const std::string& flag, const std::string& alias,
                                    std::optional<std::string> value = std::nullopt) {
  std::vector<std::string> a = base_args();
  const auto at = std::find(a.begin(), a.end(), flag);
  REQUIRE(at != a.end());
  *at = alias;
  if (value) *(at + 1) = *value;
  return a;
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("every llama.cpp alias gives the same generation as specdec's own name", "[cli]") {
  const nlohmann::json reference = outcome(json_of(base_args()));
  REQUIRE(reference["tokens"].size() > 0);
  const std::vector<std::pair<std::string, std::string>> aliases = {
      {"--target", "-m"},
      {"--target", "--model"},
      {"--draft", "-md"},
      {"--draft", "--model-draft"},
      {"--draft", "--spec-draft-model"},
      {"--prompt", "-p"},
      {"--max-tokens", "-n"},
      {"--max-tokens", "--n-predict"},
      {"--max-tokens", "--predict"},
      {"--seed", "-s"},
      {"-k", "--draft-max"},
      {"-k", "--draft-n"},
      {"-k", "--spec-draft-n-max"},
      {"--stop", "-r"},
      {"--stop", "--reverse-prompt"},
      {"--threads", "-t"},
      {"--temp", "--temperature"},
  };
  for (const auto& [flag, alias] : aliases) {
    INFO(flag << " -> " << alias);
    CHECK(outcome(json_of(with_alias(flag, alias))) == reference);
  }
  // A one-letter flag with its number glued on, as llama.cpp users type "-n64".
  {
    auto a = base_args();
    const auto at = std::find(a.begin(), a.end(), "--max-tokens");
    *at = "-n24";
    a.erase(at + 1);
    CHECK(outcome(json_of(a)) == reference);
  }
  // -f / --file / --prompt-file, and -f - for stdin; the file's final newline is dropped.
  const auto file = specdec::test::temp_path(".txt");
  std::ofstream(file) << kPrompt << "\n";
  for (const char* flag : {"-f", "--file", "--prompt-file"}) {
    INFO(flag);
    CHECK(outcome(json_of(with_alias("--prompt", flag, file.string()))) == reference);
  }
  CHECK(outcome(json_of(with_alias("--prompt", "-f", "-"), std::string(kPrompt) + "\n")) ==
        reference);
  std::filesystem::remove(file);
  // -e: escapes in the prompt become the characters.
  {
    std::string escaped = kPrompt;
    escaped.replace(escaped.find('\n'), 1, "\\n");
    CHECK(outcome(json_of(plus(with_alias("--prompt", "-p", escaped), {"-e"}))) == reference);
    CHECK(outcome(json_of(plus(with_alias("--prompt", "-p", escaped), {"--escape"}))) == reference);
    CHECK(json_of(with_alias("--prompt", "-p", escaped))["prompt_tokens"] !=
          reference["prompt_tokens"]);  // without -e the backslash stays
  }
  // A prompt that looks like a flag is still the prompt (never a misparse).
  CHECK(json_of(with_alias("--prompt", "-p", "-ngl"))["prompt_tokens"].size() > 1);
}

TEST_CASE("the context, draft context, draft threads and KV cache type flags reach the models",
          "[cli]") {
  // The demo pair was trained for 256 positions: that is the default context (capped at 4096).
  const auto j = json_of(base_args());
  CHECK(j["context_length"] == 256);
  CHECK(j["draft_context_length"] == 256);
  CHECK(j["kv_cache_type"] == "f32");
  for (const char* c : {"-c", "--ctx-size"}) {
    const auto r = json_of(plus(base_args(), {c, "100"}));
    CHECK(r["context_length"] == 100);
    CHECK(r["draft_context_length"] == 100);
  }
  for (const char* cd : {"-cd", "--ctx-size-draft"}) {
    const auto r = json_of(plus(base_args(), {"-c", "200", cd, "64"}));
    CHECK(r["context_length"] == 200);
    CHECK(r["draft_context_length"] == 64);
  }
  CHECK(json_of(plus(base_args(), {"-c", "0"}))["context_length"] == 256);  // 0: the model's
  // A context beyond the trained one is allowed, with a warning (llama.cpp does the same).
  {
    const auto r = run_cli(plus(plus({"generate"}, base_args()), {"-c", "300", "--json"}));
    CHECK(r.status == 0);
    CHECK(r.err.find("specdec: warning: -c 300 is more than the target was trained for (256 "
                     "positions)") != std::string::npos);
  }
  // The thread counts change no token (the CPU backend's results do not depend on them).
  CHECK(outcome(json_of(plus(base_args(), {"-td", "2"}))) == outcome(j));
  CHECK(outcome(json_of(plus(base_args(), {"--threads-draft", "2"}))) == outcome(j));
  // f16 KV caches: the same through both spellings.
  const auto f16 =
      outcome(json_of(plus(base_args(), {"--cache-type-k", "f16", "--cache-type-v", "f16"})));
  CHECK(f16["kv_cache_type"] == "f16");
  CHECK(outcome(json_of(plus(base_args(), {"-ctk", "f16", "-ctv", "f16"}))) == f16);
  // Weight repacking: on by default, off through both spellings (llama.cpp's), and it changes
  // no token (tests/cpu/test_invariants.cpp compares the logits of quantised models bitwise).
  CHECK(j["repack_weights"] == true);
  for (const char* off : {"--no-repack", "-nr"}) {
    const auto r = json_of(plus(base_args(), {off}));
    CHECK(r["repack_weights"] == false);
    nlohmann::json same = outcome(r);
    same["repack_weights"] = true;
    CHECK(same == outcome(j));
  }
}

TEST_CASE("a draft with a shorter context is reported at the start", "[cli]") {
  const auto r =
      run_cli(plus(plus({"generate"}, with_alias("--max-tokens", "-n", "60")), {"-cd", "40"}));
  INFO(r.err);
  CHECK(r.status == 0);
  const auto at = r.err.find(
      "specdec: warning: the draft's context holds 40 positions but this generation may reach ");
  CHECK(at == 0);  // before anything else
  CHECK(r.err.find("the target decodes alone") != std::string::npos);
  // A draft long enough for prompt + -n: no warning.
  const auto quiet = run_cli(plus(plus({"generate"}, base_args()), {"-cd", "200", "-n", "20"}));
  CHECK(quiet.err.find("warning") == std::string::npos);
}

TEST_CASE("n-predict -1 generates until EOS or the context is full", "[cli]") {
  for (const char* n : {"-n", "--n-predict"}) {
    const auto j = json_of(plus(with_alias("--max-tokens", n, "-1"), {"-c", "64"}));
    CHECK(j["max_new_tokens"] == -1);
    const std::string stop = j["stop_reason"];
    CHECK((stop == "context_full" || stop == "eos" || stop == "stop_string"));
    if (stop == "context_full") CHECK(j["prompt_tokens"].size() + j["tokens"].size() == 64);
  }
  // Without the stop string the demo pair fills the context.
  auto a = with_alias("--max-tokens", "-n", "-1");
  a.erase(std::find(a.begin(), a.end(), "--stop"), std::find(a.begin(), a.end(), "--stop") + 2);
  const auto full = json_of(plus(a, {"-c", "64"}));
  CHECK(full["stop_reason"] == "context_full");
  CHECK(full["prompt_tokens"].size() + full["tokens"].size() == 64);
}

TEST_CASE("seed -1 draws a seed, prints it, and that seed repeats the run", "[cli]") {
  for (const char* s : {"-s", "--seed"}) {
    const auto r = run_cli(plus(plus({"generate"}, with_alias("--seed", s, "-1")), {"--json"}));
    INFO(r.err);
    REQUIRE(r.status == 0);
    const auto j = specdec::test::parse_json_output(r);
    const std::string seed = std::to_string(j["seed"].get<std::uint64_t>());
    CHECK(r.err == "specdec: random seed " + seed + " (-s " + seed + " repeats this run)\n");
    CHECK(outcome(json_of(with_alias("--seed", "-s", seed))) == outcome(j));
  }
}

TEST_CASE("ignore-eos generates past the end-of-sequence token", "[cli]") {
  // The demo pair practically never samples EOS, so the test gives the target a common one:
  // " LORD" (id 401, which the prompt does not contain) made a control token and the EOS id.
  constexpr token_t kEos = 401;
  const specdec::GgufFile in = specdec::read_gguf(demo_target());
  specdec::GgufWriter w(in.alignment);
  for (auto [key, value] : in.metadata) {
    if (key == "tokenizer.ggml.eos_token_id") value.value = std::uint64_t{kEos};
    if (key == "tokenizer.ggml.token_type")
      std::get<specdec::GgufValue::Array>(value.value).at(kEos).value = std::int64_t{3};  // control
    w.set(key, value);
  }
  for (const auto& t : in.tensors)
    w.add_tensor(t.name, *t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes));
  const auto model = specdec::test::temp_path(".gguf");
  w.write(model.string());

  const std::vector<std::string> args = {"-m", model.string(), "--baseline", "-p", kPrompt,
                                         "-n", "40",           "--temp",     "0"};
  const auto stops = json_of(args);
  CHECK(stops["stop_reason"] == "eos");
  const auto goes_on = json_of(plus(args, {"--ignore-eos"}));
  CHECK(goes_on["stop_reason"] == "max_tokens");
  CHECK(goes_on["tokens"].size() == 40);
  CHECK(goes_on["ignore_eos"] == true);
  // The same tokens up to the EOS, which is then emitted like any other token.
  const auto before = stops["tokens"].get<std::vector<token_t>>();
  const auto after = goes_on["tokens"].get<std::vector<token_t>>();
  REQUIRE(after.size() > before.size());
  CHECK(std::equal(before.begin(), before.end(), after.begin()));
  CHECK(after[before.size()] == kEos);
  // -sp / --special: the control token's piece is written into the text where it was emitted
  // (without the flag it vanishes, as the reference tokenizers decode).
  for (const char* sp : {"-sp", "--special"}) {
    const auto shown = json_of(plus(args, {"--ignore-eos", sp}));
    CHECK(shown["tokens"] == goes_on["tokens"]);
    CHECK(shown["special"] == true);
    const std::string text = shown["text"];
    const std::string plain = goes_on["text"];
    const auto at = text.find("\xe2\x96\x81LORD");  // the piece "▁LORD"
    REQUIRE(at != std::string::npos);
    CHECK(plain.find("LORD") == std::string::npos);
    CHECK(text.substr(0, at) == plain.substr(0, at));  // the same text before it
  }
  std::filesystem::remove(model);
}

TEST_CASE("draft-min: shorter proposals are not verified and greedy output is unchanged", "[cli]") {
  // The n-gram drafter proposes whatever continuation its match has, often fewer than k tokens.
  const std::vector<std::string> args = {"-m", demo_target(), "--ngram", "3", "-p",     kPrompt,
                                         "-n", "80",          "-k",      "6", "--temp", "0"};
  const auto plain = json_of(args);
  const auto count_short = [](const nlohmann::json& j, std::size_t below) {
    std::size_t n = 0;
    for (const auto& r : j["rounds"]) n += !r["drafted"].empty() && r["drafted"].size() < below;
    return n;
  };
  REQUIRE(count_short(plain, 4) > 0);  // the case the flag is about occurs
  for (const char* flag : {"--draft-min", "--draft-n-min", "--spec-draft-n-min"}) {
    INFO(flag);
    const auto j = json_of(plus(args, {flag, "4"}));
    CHECK(count_short(j, 4) == 0);
    CHECK(j["draft_min"] == 4);
    CHECK(j["tokens"] == plain["tokens"]);  // greedy: exactly the same tokens
  }
  // With --adaptive it is also the least k.
  const auto adaptive = json_of({"-m", demo_target(), "-md", demo_draft(), "-p", kPrompt, "-n",
                                 "60", "--adaptive", "--draft-min", "3", "--draft-max", "5"});
  for (const auto& r : adaptive["rounds"]) {
    CHECK(r["draft_length"].get<std::size_t>() <= 5);
    if (!r["drafted"].empty()) CHECK(r["drafted"].size() >= 3);
  }
  CHECK(adaptive["max_k"] == 5);
}

TEST_CASE("color and display-prompt flags shape the streamed text", "[cli]") {
  const std::vector<std::string> args = {"generate", "-m",    demo_target(), "-md", demo_draft(),
                                         "-p",       kPrompt, "-n",          "24",  "--temp",
                                         "0"};
  const auto plain = run_cli(args);
  REQUIRE(plain.status == 0);
  CHECK(plain.out.find("\x1b[") == std::string::npos);  // not a terminal: no colours
  CHECK(plain.out.rfind(kPrompt, 0) == 0);              // the prompt first
  for (const std::vector<std::string>& colour :
       {std::vector<std::string>{"--color"}, {"--color", "on"}, {"-co", "on"}, {"--color=on"}}) {
    const auto r = run_cli(plus(args, colour));
    INFO(colour.front());
    REQUIRE(r.status == 0);
    CHECK(r.out.find("\x1b[32m") != std::string::npos);  // accepted drafts in green
    CHECK(r.out.rfind("\x1b[2m" + std::string(kPrompt) + "\x1b[0m", 0) == 0);  // dim prompt
  }
  CHECK(run_cli(plus(args, {"--color", "off"})).out == plain.out);
  CHECK(run_cli(plus(args, {"--color", "auto"})).out == plain.out);
  const auto no_prompt = run_cli(plus(args, {"--no-display-prompt"}));
  CHECK(no_prompt.out == plain.out.substr(std::string(kPrompt).size()));
}

TEST_CASE("bench, demo and logits take the same llama.cpp names", "[cli]") {
  const auto bench =
      run_cli({"bench", "-m",      demo_target(), "-md",      demo_draft(), "-n",    "8",
               "-s",    "3",       "-t",          "1",        "-c",         "128",   "--draft-max",
               "2",     "--limit", "1",           "--repeat", "1",          "--json"});
  INFO(bench.err);
  REQUIRE(bench.status == 0);
  const auto j = specdec::test::parse_json_output(bench);
  CHECK(j["seed"] == 3);
  CHECK(j["threads"] == 1);
  const auto demo = run_cli({"demo", "-n", "4", "--repeat", "1", "-s", "2", "-t", "1"});
  INFO(demo.err);
  CHECK(demo.status == 0);
  CHECK(demo.out.find("seed 2") != std::string::npos);
  const auto out = specdec::test::temp_path(".f32");
  const auto logits =
      run_cli({"logits", "-m", demo_target(), "--tokens", "1,2,3", "-o", out.string(), "-t", "1"});
  CHECK(logits.status == 0);
  CHECK(std::filesystem::file_size(out) == 3 * 4096 * 4);
  std::filesystem::remove(out);
}

TEST_CASE("llama.cpp flags that ask for what specdec does anyway run, each with a note", "[cli]") {
  const nlohmann::json reference = outcome(json_of(base_args()));
  // Each of these, given to llama.cpp, means what specdec does: the same generation, and one
  // note on stderr saying what became of the flag (as typed, with its value).
  const std::vector<std::pair<std::vector<std::string>, std::string>> harmless = {
      {{"-ngl", "0"}, "specdec: note: -ngl 0: the models run on the CPU (--backend cpu)\n"},
      {{"-fa", "off"}, "specdec: note: -fa off: ignored: specdec's attention is one fused"},
      {{"--flash-attn", "on"}, "specdec: note: --flash-attn on: ignored"},
      {{"-b", "2048"}, "specdec: note: -b 2048: ignored: the prompt is evaluated in steps"},
      {{"-ub", "512"}, "specdec: note: -ub 512: ignored"},
      {{"--mmap"}, "specdec: note: --mmap: ignored: specdec always reads model files"},
      {{"--no-mmap"}, "specdec: note: --no-mmap: ignored"},
      {{"--no-context-shift"}, "specdec: note: --no-context-shift: ignored: specdec never shifts"},
      {{"-no-cnv"}, "specdec: note: -no-cnv: ignored: specdec generate answers once"},
      {{"-st"}, "specdec: note: -st: ignored: specdec generate answers once"},
      {{"--no-warmup"}, "specdec: note: --no-warmup: ignored"},
      {{"--perf"}, "specdec: note: --perf: ignored: specdec always prints its statistics"},
      {{"--jinja"}, "specdec: note: --jinja: ignored: specdec renders the chat template"},
      {{"--mirostat", "0"}, "specdec: note: --mirostat 0: ignored"},
      {{"--log-timestamps"}, "specdec: note: --log-timestamps: ignored"},
  };
  for (const auto& [flags, note] : harmless) {
    INFO(flags.front());
    std::vector<std::string> a = {"generate"};
    for (const auto& x : plus(base_args(), flags)) a.push_back(x);
    a.emplace_back("--json");
    const auto r = run_cli(a);
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(outcome(specdec::test::parse_json_output(r)) == reference);
    CHECK(r.err.find(note) != std::string::npos);
  }
  // -ngl 0 is --backend cpu, which an explicit --backend given with it overrides.
  CHECK(json_of(plus(base_args(), {"-ngl", "0"}))["backend"] == "cpu");
}

TEST_CASE("llama.cpp's logging flags: --log-disable, -lv, -v, --log-file", "[cli]") {
  const auto args = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate"};
    for (const auto& x : plus(base_args(), extra)) a.push_back(x);
    return a;
  };
  // Default: the statistics line (information) is shown.
  auto r = run_cli(args({}));
  REQUIRE(r.status == 0);
  CHECK(r.err.find("[draft model k=3]") != std::string::npos);
  // --log-disable and -lv 2: errors (and warnings at 2) only; stdout unchanged.
  for (const auto& quiet : std::vector<std::vector<std::string>>{
           {"--log-disable"}, {"-lv", "2"}, {"--verbosity", "1"}}) {
    const auto q = run_cli(args(quiet));
    INFO(quiet.front());
    CHECK(q.status == 0);
    CHECK(q.err.empty());
    CHECK(q.out == r.out);
  }
  // Errors are shown whatever the verbosity.
  const auto bad = run_cli({"generate", "-m", "/nonexistent.gguf", "-p", "x", "--log-disable"});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("/nonexistent.gguf") != std::string::npos);
  // -v / --verbose: also the debug lines (what each model is).
  for (const char* v : {"-v", "--verbose", "--log-verbose"}) {
    const auto d = run_cli(args({v}));
    INFO(v);
    CHECK(d.status == 0);
    CHECK(d.err.find("specdec: debug: target ") != std::string::npos);
    CHECK(d.err.find("specdec: debug: draft ") != std::string::npos);
  }
  // --log-file: what stderr would show goes to the file.
  const auto log = specdec::test::temp_path(".log");
  const auto f = run_cli(args({"--log-file", log.string()}));
  CHECK(f.status == 0);
  CHECK(f.err.empty());
  CHECK(specdec::test::read_file(log).find("[draft model k=3]") != std::string::npos);
  std::filesystem::remove(log);
}

TEST_CASE("generate without a drafter decodes with the target alone, as --baseline", "[cli]") {
  auto a = base_args();
  a.erase(std::find(a.begin(), a.end(), "--draft"), std::find(a.begin(), a.end(), "--draft") + 2);
  const nlohmann::json plain = json_of(a);
  CHECK(plain["mode"] == "baseline");
  CHECK(outcome(plain) == outcome(json_of(plus(a, {"--baseline"}))));
}
