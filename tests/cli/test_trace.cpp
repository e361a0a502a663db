// generate --trace writes a self-contained HTML page that renders every round: checked by reading
// the page's embedded data and by rendering it in headless Chromium (the test SKIPs when no
// chromium is installed; Debian: apt-get install chromium).

#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
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
  const Traced t = traced_generation({"--draft", demo_draft(), "--temp", "0.8", "--seed", "11"});
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
  CHECK(count("<span class=\"tok rej\">") == rejected + 1);
  CHECK(count("<span class=\"tok bon\">") == bonus + 1);
}
