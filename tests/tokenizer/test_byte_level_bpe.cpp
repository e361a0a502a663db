// Byte-level BPE against Hugging Face `tokenizers` (fixtures by tools/make_tokenizer_fixtures.py):
// the Llama-3 and Qwen2 pre-tokenizer regexes and GPT-2's ByteLevel regex, NFC, tokenizer.json
// reading, and what read_hf_tokenizer_json() refuses.

#include <fstream>
#include <random>

#include "fixtures.hpp"
#include "internal.hpp"
#include "nfc.hpp"
#include "pretokenizer.hpp"

using namespace specdec;

namespace {

/// The texts as the reference saw them: invalid UTF-8 replaced (Python's "replace").
std::vector<std::string> reference_inputs(const std::vector<test::TextCase>& texts,
                                          const nlohmann::json& fx) {
  std::vector<std::string> out;
  const auto& replaced = fx.at("inputs_replaced");
  for (std::size_t i = 0; i < texts.size(); ++i) {
    out.push_back(replaced[i].is_null() ? texts[i].bytes : replaced[i].get<std::string>());
  }
  return out;
}

std::string json_path(const std::string& name) {
  return (test::tokenizer_data() / name / "tokenizer.json").string();
}

}  // namespace

TEST_CASE("Byte-level BPE matches Hugging Face tokenizers on every fixture tokenizer",
          "[tokenizer][bpe]") {
  const auto texts = test::load_texts();
  const auto fixtures = test::load_json(test::tokenizer_data() / "bpe-fixtures.json");
  for (const auto& [name, fx] : fixtures.at("tokenizers").items()) {
    DYNAMIC_SECTION(name) {
      const TokenizerSpec spec = read_hf_tokenizer_json(json_path(name));
      const auto tok = make_tokenizer(spec);
      CHECK(tok->vocab_size() == fx.at("vocab_size").get<std::size_t>());
      const auto inputs = reference_inputs(texts, fx);
      const int round_trips = test::check_against_fixtures(*tok, texts, fx, inputs);
      CHECK(round_trips >= 60);  // all valid texts: byte-level BPE is lossless

      // Invalid UTF-8 is repaired as Python's bytes.decode("utf-8", "replace") does.
      for (std::size_t i = 0; i < texts.size(); ++i) {
        CHECK(detail::utf8_repair(texts[i].bytes, detail::Utf8Repair::maximal_subpart) ==
              inputs[i]);
      }

      // The pre-tokenizer alone: regex pieces in the byte-level alphabet.
      const std::vector<std::string> regexes =
          spec.pre_regexes.empty() && spec.pre != "none"
              ? std::vector{detail::pretokenizer_regex(spec.pre)}
              : spec.pre_regexes;
      const detail::RegexSplitter splitter(regexes, name);
      for (std::size_t i = 0; i < texts.size(); ++i) {
        INFO("text " << i << " '" << texts[i].name << "'");
        std::vector<std::string_view> pieces;
        splitter.split(inputs[i], pieces);
        std::vector<std::string> mapped;
        for (auto p : pieces) mapped.push_back(detail::byte_level_encode(p));
        CHECK(mapped == fx.at("pretokens")[i].get<std::vector<std::string>>());
      }

      if (fx.contains("encode_transformers")) {
        // tokenizer_config.json beside it: names BOS/EOS, and its add_bos_token is ignored as
        // transformers ignores it (the reference run recorded what AutoTokenizer produced).
        const auto bos_eos = fx.at("transformers_bos_eos").get<std::vector<token_t>>();
        CHECK(tok->bos() == bos_eos.at(0));
        CHECK(tok->eos() == bos_eos.at(1));
        for (std::size_t i = 0; i < texts.size(); ++i) {
          CHECK(tok->encode(texts[i].bytes, true) == test::ids_of(fx.at("encode_transformers")[i]));
        }
      }
    }
  }
}

TEST_CASE("The Oniguruma-to-PCRE2 rewrite keeps \\s equal to Unicode White_Space",
          "[tokenizer][bpe]") {
  // \s must match U+0085 (NEL) and not U+180E as in Oniguruma; the fixture text "ws-classes"
  // checks all the White_Space members against the reference end to end.
  const detail::RegexSplitter splitter({R"(\s+)", R"([^\s\p{L}]+|\S+)"}, "test");
  std::vector<std::string_view> pieces;
  splitter.split(
      "a\xC2\x85\xC2\x85"
      "b\xE1\xA0\x8E",
      pieces);
  CHECK(pieces == std::vector<std::string_view>{"a", "\xC2\x85\xC2\x85", "b\xE1\xA0\x8E"});
  CHECK_THROWS_AS(detail::oniguruma_to_pcre2(R"([\S])"), Error);
  // \Q...\E and escaped backslashes are left alone; "]" first in a class is a literal.
  const std::string ws = detail::oniguruma_to_pcre2(R"(\s)");
  CHECK(detail::oniguruma_to_pcre2(R"(\Q\s\E[]\s]\\s)") ==
        R"(\Q\s\E[])" + ws.substr(1, ws.size() - 2) + R"(]\\s)");
}

TEST_CASE("read_hf_tokenizer_json refuses tokenizers it cannot reproduce", "[tokenizer][bpe]") {
  const auto original = test::load_json(json_path("llama3-bpe"));
  // A directory of its own: the release and sanitizer builds may run this test at the same time.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("specdec-test-tokenizer-json-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const auto error_of = [&](const nlohmann::json& j) -> std::string {
    const auto path = (dir / "tokenizer.json").string();
    std::ofstream(path) << j.dump();
    try {
      (void)make_tokenizer(read_hf_tokenizer_json(path));
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  using Catch::Matchers::Contains;
  CHECK(error_of(original) == "no error");
  {
    auto j = original;
    j["normalizer"] = {{"type", "NFKC"}};
    CHECK_THAT(error_of(j), Contains("tokenizer.json") && Contains("normalizer 'NFKC'"));
  }
  {
    auto j = original;
    j["model"]["type"] = "WordPiece";
    CHECK_THAT(error_of(j), Contains("model type 'WordPiece'"));
  }
  {
    auto j = original;
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
    CHECK_THAT(error_of(j), Contains("Removed"));
  }
  {
    auto j = original;
    j["added_tokens"][0]["lstrip"] = true;
    CHECK_THAT(error_of(j), Contains("lstrip"));
  }
  {
    auto j = original;
    j["model"]["merges"].push_back(nlohmann::json::array({"zzzq", "qqqz"}));
    CHECK_THAT(error_of(j), Contains("not in the vocabulary"));
  }
  {
    auto j = original;
    j["model"]["vocab"].erase("Ġ");
    CHECK_THAT(error_of(j), Contains("contiguous"));
  }
  {
    auto j = original;
    j["decoder"] = {{"type", "Metaspace"}};
    CHECK_THAT(error_of(j), Contains("decoder"));
  }
  {
    auto j = original;
    j["model"]["vocab"] = 5;
    CHECK_THAT(error_of(j), Contains("model.vocab"));
  }
  {
    auto j = original;
    j.erase("model");
    CHECK_THAT(error_of(j), Contains("unexpected structure"));
  }
  {
    auto j = original;
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
    CHECK_THAT(error_of(j), Contains("(unclosed"));
  }
  std::ofstream(dir / "tokenizer.json") << "{ not json";
  CHECK_THROWS_WITH(read_hf_tokenizer_json((dir / "tokenizer.json").string()),
                    Contains("not valid JSON"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("make_tokenizer refuses inconsistent specs", "[tokenizer]") {
  using Catch::Matchers::Contains;
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.pre = "deepseek-coder";
  spec.tokens = {"a", "b"};
  spec.source = "spec.gguf";
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("spec.gguf") && Contains("deepseek-coder"));
  spec.pre = "gpt2";
  spec.merges = {"a b"};
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("merge 0 'a b'"));
  spec.merges = {"ab"};
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("merge 0"));
  spec.model = "bert";
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("'bert'"));
  spec.model = "llama";
  spec.merges.clear();
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("scores"));
  spec.scores = {0.0f, 0.0f};
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("unknown"));
  spec.token_types = {2, 1, 1};
  CHECK_THROWS_WITH(make_tokenizer(spec), Contains("3 token types for 2 tokens"));
}

TEST_CASE("NFC matches Python's unicodedata and Hugging Face's NFC normalizer",
          "[tokenizer][nfc]") {
  const auto fixtures = test::load_json(test::tokenizer_data() / "nfc-fixtures.json");
  const auto& cases = fixtures.at("cases");
  REQUIRE(cases.size() > 5000);
  for (const auto& c : cases) {
    const auto input = c.at(0).get<std::string>();
    INFO("input " << c.at(0).dump());
    CHECK(detail::nfc(input) == c.at(1).get<std::string>());
  }
}
