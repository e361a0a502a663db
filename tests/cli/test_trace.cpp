// generate --trace writes a self-contained HTML page that renders every round: checked by reading
// the page's embedded data and by rendering it in headless Chromium (the test SKIPs when no
// chromium is installed; Debian: apt-get install chromium). The p(x) and q(x) it shows per
// drafted token are checked against the two models run here, in this process.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec_test.hpp"

using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::read_file;
using specdec::test::run_cli;

namespace {

struct Traced {
  nlohmann::json json;  // generate --json output
  std::string html;     // the trace page
};

Traced traced_generation(std::vector<std::string> extra) {
  const auto page = specdec::test::temp_path(".html");
  std::vector<std::string> args = {
      "generate",
      "--target",
      demo_target(),
      "--prompt",
      "1 In the beginning God created the heaven and the earth.\n2 And the earth was",
      "-n",
      "40",
      "--json",
      "--trace",
      page.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  Traced t{specdec::test::parse_json_output(r), read_file(page)};
  std::filesystem::remove(page);
  return t;
}

/// The JSON the page embeds in <script type="application/json" id="trace-data">.
nlohmann::json embedded_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"trace-data\">";
  const auto begin = html.find(open);
  REQUIRE(begin != std::string::npos);
  const auto end = html.find("</script>", begin);
  REQUIRE(end != std::string::npos);
  return nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

/// Path of a Chromium binary, or empty.
std::string find_chromium() {
  if (const char* env = std::getenv("SPECDEC_CHROMIUM")) return env;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const auto r = specdec::test::run_program("/bin/sh", {"-c", std::string("command -v ") + name});
    if (r.status == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  return {};
}

}  // namespace

TEST_CASE("the trace page is self-contained and holds every round", "[cli]") {
  const Traced t = traced_generation({"--draft", demo_draft(), "--temp", "0.8", "--seed", "3"});
  for (const char* external : {"http://", "https://", "<link", " src=", "@import", "url("}) {
    INFO(external);
    CHECK(t.html.find(external) == std::string::npos);
  }
  const nlohmann::json data = embedded_data(t.html);
  const auto& rounds = t.json["rounds"];
  REQUIRE(data["rounds"].size() == rounds.size());
  REQUIRE(rounds.size() == t.json["stats"]["rounds"].get<std::size_t>());
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    INFO("round " << i);
    const auto& page = data["rounds"][i];
    CHECK(page["accepted"] == rounds[i]["accepted"]);
    CHECK(page["drafted"].size() == rounds[i]["drafted"].size());
    for (std::size_t j = 0; j < page["drafted"].size(); ++j)
      CHECK(page["drafted"][j]["id"] == rounds[i]["drafted"][j]);
    CHECK(page["next"]["id"] == rounds[i]["next"]);
    CHECK(page["bonus"] == rounds[i]["bonus"]);
  }
}

TEST_CASE("tree rounds (--suffix): the page holds each round's tree and the kept path", "[cli]") {
  const Traced t = traced_generation({"--suffix", "--tree-nodes", "8", "--temp", "0"});
  const nlohmann::json data = embedded_data(t.html);
  const auto& rounds = t.json["rounds"];
  REQUIRE(data["rounds"].size() == rounds.size());
  std::size_t trees = 0;
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    INFO("round " << i);
    const auto& page = data["rounds"][i];
    if (rounds[i]["drafted"].empty()) continue;
    ++trees;
    REQUIRE(page["tree_parents"] == rounds[i]["tree_parents"]);
    REQUIRE(page["accepted_nodes"] == rounds[i]["accepted_nodes"]);
    REQUIRE(rounds[i]["tree_parents"].size() == rounds[i]["drafted"].size());
    REQUIRE(rounds[i]["accepted_nodes"].size() == rounds[i]["accepted"].get<std::size_t>());
    REQUIRE(rounds[i]["drafted"].size() <= 8);
  }
  CHECK(trees > 0);  // the verse repeats "the earth": the suffix index has continuations
}

TEST_CASE(
    "draft model trees and suffix trees with the draft model behind: the flags reach the "
    "drafter, and greedy output is the baseline's",
    "[cli]") {
  const Traced base = traced_generation({"--baseline", "--temp", "0"});
  for (const bool suffix : {false, true}) {
    INFO((suffix ? "--suffix -md" : "-md --tree-nodes"));
    std::vector<std::string> flags = {"--draft",       demo_draft(), "--tree-nodes", "6",
                                      "--tree-topk",   "3",          "--tree-depth", "3",
                                      "--draft-p-min", "0.05",       "--temp",       "0"};
    if (suffix) flags.push_back("--suffix");
    const Traced t = traced_generation(flags);
    CHECK(t.json["tokens"] == base.json["tokens"]);
    const std::string decoder = t.json["decoder"].get<std::string>();
    CHECK_THAT(decoder, Catch::Matchers::Contains("trees<=6 top3 depth3 p>=0.05"));
    CHECK_THAT(decoder,
               Catch::Matchers::StartsWith(suffix ? "suffix + draft model" : "draft model"));
    CHECK(t.json["tree_topk"] == 3);
    CHECK(t.json["tree_depth"] == 3);
    std::size_t trees = 0;
    for (const auto& round : t.json["rounds"]) {
      if (round["drafted"].empty()) continue;
      ++trees;
      REQUIRE(round["tree_parents"].size() == round["drafted"].size());
      REQUIRE(round["drafted"].size() <= 6);
    }
    CHECK(trees > 0);
  }
}

TEST_CASE("p(x) and q(x) of each drafted token are the target's and the draft's probabilities",
          "[cli]") {
  const Traced t = traced_generation(
      {"--draft", demo_draft(), "--temp", "0.8", "--top-k", "40", "--seed", "9", "-k", "5"});
  const auto& rounds = t.json["rounds"];
  const nlohmann::json page = embedded_data(t.html)["rounds"];
  REQUIRE(page.size() == rounds.size());

  // The reference: each model once over prompt + generated tokens. A position's logits do not
  // depend on how many tokens shared the forward (the CPU backend is batch-invariant), so row i
  // is bitwise what the decoder saw for the token after position i.
  std::vector<specdec::token_t> sequence = t.json["prompt_tokens"];
  for (const auto& id : t.json["tokens"]) sequence.push_back(id.get<specdec::token_t>());
  const auto distributions = [&](const std::string& file) {
    const specdec::LoadedModel model = specdec::load_model(file);
    specdec::cpu::Transformer lm(model);
    const specdec::LogitsView logits = lm.forward(sequence);
    // What generate ran: --temp 0.8 --top-k 40 and llama.cpp's other defaults (top-p 0.95,
    // min-p 0.05, the temperature last).
    specdec::sampling::SamplingParams params;
    params.temperature = 0.8f;
    params.top_k = 40;
    params.top_p = 0.95f;
    params.min_p = 0.05f;
    params.temperature_last = true;
    std::vector<std::vector<float>> rows(logits.rows, std::vector<float>(logits.vocab));
    for (std::size_t i = 0; i < logits.rows; ++i)
      specdec::sampling::process_logits<float>(logits.row(i), params, rows[i]);
    return rows;
  };
  const auto p = distributions(demo_target());
  const auto q = distributions(demo_draft());

  std::size_t checked = 0, rejected = 0;
  for (std::size_t i = 0; i < rounds.size(); ++i) {
    const auto& r = rounds[i];
    INFO("round " << i);
    const auto drafted = r["drafted"].get<std::vector<specdec::token_t>>();
    REQUIRE(r["p"].size() == drafted.size());
    REQUIRE(r["q"].size() == drafted.size());
    for (std::size_t j = 0; j < drafted.size(); ++j) {  // the page shows the same numbers
      CHECK(page[i]["drafted"][j]["p"] == r["p"][j]);
      CHECK(page[i]["drafted"][j]["q"] == r["q"][j]);
    }
    const std::size_t accepted = r["accepted"], position = r["position"];
    if (r["emitted"].get<std::size_t>() != accepted + 1) continue;  // cut by a stop
    // x_1 .. x_n (accepted) and x_(n+1) (rejected) follow prefixes of the final sequence.
    for (std::size_t j = 0; j < drafted.size() && j <= accepted; ++j) {
      const std::size_t row = position - 1 + j;
      const auto x = static_cast<std::size_t>(drafted[j]);
      CHECK(r["p"][j].get<float>() == p[row][x]);
      CHECK(r["q"][j].get<float>() == q[row][x]);
      ++checked;
      if (j < accepted) {
        CHECK(r["p"][j].get<float>() > 0);  // a token the target cannot emit is never accepted
      } else {
        CHECK(r["p"][j].get<float>() < r["q"][j].get<float>());  // p >= q is always accepted
        ++rejected;
      }
    }
    // Per-round times: the decoder's split, adding up to the run's totals.
    CHECK(page[i]["verify_seconds"].get<double>() > 0);
    CHECK(page[i]["draft_seconds"].get<double>() >= 0);
  }
  CHECK(checked > 20);
  CHECK(rejected > 0);
  double verify = 0;
  for (const auto& r : rounds) verify += r["verify_seconds"].get<double>();
  CHECK(verify == Approx(t.json["stats"]["verify_seconds"].get<double>()));
}

// --n-probs: each generated token's log-probability and its alternatives come from the target's
// processed row at that position (greedy: the softmax of the logits), in --json and in the page.
TEST_CASE("log-probabilities (--n-probs) are the target's processed ones, in JSON and the trace",
          "[cli]") {
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    const Traced t = traced_generation(
        greedy ? std::vector<std::string>{"--draft", demo_draft(), "--temp", "0", "--n-probs", "3"}
               : std::vector<std::string>{"--draft", demo_draft(), "--temp", "0.8", "--top-k", "40",
                                          "--seed", "9", "-k", "5", "--n-probs", "3"});
    const nlohmann::json& lps = t.json["logprobs"];
    REQUIRE(lps.size() == t.json["tokens"].size());
    CHECK(embedded_data(t.html)["logprobs"] == lps);
    CHECK(t.html.find("logprobText(emittedIndex)") != std::string::npos);
    const std::vector<specdec::token_t> prompt = t.json["prompt_tokens"];
    std::vector<specdec::token_t> sequence = prompt;
    for (const auto& id : t.json["tokens"]) sequence.push_back(id.get<specdec::token_t>());
    const specdec::LoadedModel model = specdec::load_model(demo_target());
    specdec::cpu::Transformer lm(model);
    const specdec::LogitsView logits = lm.forward(sequence);
    specdec::sampling::SamplingParams params;  // greedy: the plain softmax
    if (!greedy) {
      params.temperature = 0.8f;
      params.top_k = 40;
      params.top_p = 0.95f;
      params.min_p = 0.05f;
      params.temperature_last = true;
    }
    std::size_t short_tops = 0;
    for (std::size_t i = 0; i < lps.size(); ++i) {
      INFO("token " << i);
      const auto row = logits.row(prompt.size() - 1 + i);
      const std::vector<float> p = specdec::sampling::process_logits<float>(row, params);
      const auto log_of = [&](std::size_t id) {
        return static_cast<float>(std::log(static_cast<double>(p[id])));
      };
      const auto token = lps[i]["id"].get<std::size_t>();
      CHECK(token == t.json["tokens"][i].get<std::size_t>());
      CHECK(lps[i]["logprob"].get<float>() == log_of(token));
      std::vector<std::size_t> ids(row.size());
      for (std::size_t j = 0; j < ids.size(); ++j) ids[j] = j;
      std::stable_sort(ids.begin(), ids.end(),
                       [&](std::size_t a, std::size_t b) { return row[a] > row[b]; });
      const auto& top = lps[i]["top_logprobs"];
      std::size_t want = 0;
      while (want < 3 && p[ids[want]] > 0) ++want;
      REQUIRE(top.size() == want);
      short_tops += want < 3;
      for (std::size_t j = 0; j < want; ++j) {
        CHECK(top[j]["id"] == ids[j]);
        CHECK(top[j]["logprob"].get<float>() == log_of(ids[j]));
        CHECK(top[j]["token"] ==
              model.tokenizer->token_bytes(static_cast<specdec::token_t>(ids[j])));
      }
    }
    if (!greedy) CHECK(short_tops > 0);  // tokens outside top-p / min-p are not alternatives
  }
}

TEST_CASE("greedy: p(x) and q(x) are 0 or 1, as the one-hot distributions are", "[cli]") {
  const Traced t = traced_generation({"--draft", demo_draft(), "--temp", "0"});
  for (const auto& r : t.json["rounds"]) {
    const std::size_t accepted = r["accepted"];
    for (std::size_t j = 0; j < r["drafted"].size() && j <= accepted; ++j) {
      CHECK(r["q"][j] == 1.0);  // the draft's argmax
      CHECK(r["p"][j] == (j < accepted ? 1.0 : 0.0));
    }
  }
}

TEST_CASE("a baseline trace shows one target step per token", "[cli]") {
  const Traced t = traced_generation({"--baseline", "--temp", "0"});
  const nlohmann::json data = embedded_data(t.html);
  const auto tokens = t.json["tokens"];
  REQUIRE(data["rounds"].size() == tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    CHECK(data["rounds"][i]["drafted"].empty());
    CHECK(data["rounds"][i]["next"]["id"] == tokens[i]);
  }
}

TEST_CASE("headless Chromium renders every round of the trace", "[cli][chromium]") {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    WARN("SKIPPED: no chromium found (apt-get install chromium, or set SPECDEC_CHROMIUM)");
    return;
  }
  const Traced t = traced_generation(
      {"--draft", demo_draft(), "--temp", "0.8", "--seed", "11", "--n-probs", "2"});
  const auto page = specdec::test::temp_path(".html");
  std::ofstream(page) << t.html;
  const auto profile = specdec::test::temp_path("-chromium");
  const auto r = specdec::test::run_program(
      "timeout", {"120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--user-data-dir=" + profile.string(), "--dump-dom", "file://" + page.string()});
  std::filesystem::remove(page);
  std::filesystem::remove_all(profile);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string& dom = r.out;  // the DOM after the page's script ran

  const auto& rounds = t.json["rounds"];
  CHECK(dom.find("data-rendered=\"" + std::to_string(rounds.size()) + "\"") != std::string::npos);
  // Every generated token's span carries its log-probability (--n-probs), in its tooltip too.
  std::size_t with_logprob = 0;
  for (auto at = dom.find("data-logprob=\""); at != std::string::npos;
       at = dom.find("data-logprob=\"", at + 1))
    ++with_logprob;
  CHECK(with_logprob == t.json["tokens"].size());
  CHECK(dom.find("logprob \"") != std::string::npos);
  // One table row per round, in order, with its drafted and accepted counts. (Parsed by hand:
  // GCC 12's <regex> trips -Wmaybe-uninitialized in sanitizer builds.)
  const auto attribute = [&](std::size_t from, const std::string& name) -> std::size_t {
    const std::string key = name + "=\"";
    const auto at = dom.find(key, from);
    REQUIRE(at != std::string::npos);
    return std::stoul(
        dom.substr(at + key.size(), dom.find('"', at + key.size()) - at - key.size()));
  };
  const std::string row = "<tr class=\"round\"";
  std::size_t i = 0;
  std::size_t accepted = 0, rejected = 0, bonus = 0;
  for (auto at = dom.find(row); at != std::string::npos; at = dom.find(row, at + 1), ++i) {
    REQUIRE(i < rounds.size());
    INFO("round " << i);
    CHECK(attribute(at, "data-round") == i);
    CHECK(attribute(at, "data-drafted") == rounds[i]["drafted"].size());
    CHECK(attribute(at, "data-accepted") == rounds[i]["accepted"].get<std::size_t>());
    accepted += rounds[i]["accepted"].get<std::size_t>();
    rejected += rounds[i]["rejected"].get<int>() >= 0;
    bonus += rounds[i]["bonus"].get<bool>();
  }
  CHECK(i == rounds.size());
  // The coloured chips: one per accepted token, per rejected token, per bonus token.
  const auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = dom.find(needle); at != std::string::npos; at = dom.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("<span class=\"tok acc\">") == accepted + 1);  // + the legend's
  // p(x) and q(x) under every drafted token.
  std::size_t drafted = 0;
  for (const auto& r : rounds) drafted += r["drafted"].size();
  CHECK(count("<span class=\"pq\" data-p=\"") == drafted);
  CHECK(count("<span class=\"tok rej\">") == rejected + 1);
  CHECK(count("<span class=\"tok bon\">") == bonus + 1);
}

TEST_CASE("headless Chromium renders the trees of tree rounds", "[cli][chromium]") {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    WARN("SKIPPED: no chromium found (apt-get install chromium, or set SPECDEC_CHROMIUM)");
    return;
  }
  const Traced t = traced_generation({"--suffix", "--tree-nodes", "8", "--temp", "0"});
  const auto page = specdec::test::temp_path(".html");
  std::ofstream(page) << t.html;
  const auto profile = specdec::test::temp_path("-chromium");
  const auto r = specdec::test::run_program(
      "timeout", {"120", chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--user-data-dir=" + profile.string(), "--dump-dom", "file://" + page.string()});
  std::filesystem::remove(page);
  std::filesystem::remove_all(profile);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string& dom = r.out;
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = dom.find(what); at != std::string::npos; at = dom.find(what, at + 1)) ++n;
    return n;
  };
  const auto& rounds = t.json["rounds"];
  CHECK(dom.find("data-rendered=\"" + std::to_string(rounds.size()) + "\"") != std::string::npos);
  // One line per tree node, and every generated token in the text once.
  std::size_t nodes = 0;
  for (const auto& round : rounds) nodes += round["drafted"].size();
  CHECK(nodes > 0);
  CHECK(count("<div class=\"node\"") == nodes);
  CHECK(count("<span class=\"g ") == t.json["tokens"].size());
}
