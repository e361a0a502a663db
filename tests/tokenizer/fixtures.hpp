#pragma once
// Loading the conformance fixtures of tests/data/tokenizer/ (made by
// tools/make_tokenizer_fixtures.py from the reference tokenizers) and shared checks.

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specdec/model/tokenizer.hpp"
#include "specdec_test.hpp"
#include "utf8.hpp"  // src/tokenizer (internal)

namespace specdec::test {

inline std::filesystem::path tokenizer_data() { return test_data() / "tokenizer"; }

inline nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

struct TextCase {
  std::string name;
  std::string bytes;  ///< may be invalid UTF-8 on purpose
};

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

/// The text set, in fixture order (texts.json): valid UTF-8 as "text", anything else as "hex".
inline std::vector<TextCase> load_texts() {
  std::vector<TextCase> texts;
  const nlohmann::json file = load_json(tokenizer_data() / "texts.json");
  for (const auto& t : file.at("texts")) {
    texts.push_back({t.at("name").get<std::string>(), t.contains("hex")
                                                          ? from_hex(t.at("hex").get<std::string>())
                                                          : t.at("text").get<std::string>()});
  }
  return texts;
}

inline std::vector<token_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<token_t>>();
}

/// Decodes through IncrementalDetokenizer one id at a time; every chunk must be whole UTF-8.
inline std::string stream_decode(const Tokenizer& tok, const std::vector<token_t>& ids) {
  IncrementalDetokenizer detok(tok);
  std::string text;
  for (token_t id : ids) {
    const std::string chunk = detok.push(id);
    CHECK(detail::utf8_is_valid(chunk));
    text += chunk;
  }
  const std::string rest = detok.flush();
  CHECK(detail::utf8_is_valid(rest));
  return text + rest;
}

/// Checks one tokenizer against the encode/decode fixtures of one reference tokenizer.
/// `encode` holds ids without specials; `encode_with_special` (may be null) with them.
/// `reference_inputs[i]` is the text as the reference saw it (for byte-level BPE: invalid UTF-8
/// already replaced). Returns how many texts round-trip (decode(encode(s)) == s).
inline int check_against_fixtures(const Tokenizer& tok, const std::vector<TextCase>& texts,
                                  const nlohmann::json& fx,
                                  const std::vector<std::string>& reference_inputs) {
  const auto& encodings = fx.at("encode");
  const auto& round_trips = fx.at("decode_of_encode");
  REQUIRE(encodings.size() == texts.size());
  int round_tripped = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    INFO("text " << i << " '" << texts[i].name << "'");
    const std::vector<token_t> expected = ids_of(encodings[i]);
    CHECK(tok.encode(texts[i].bytes, false) == expected);
    if (fx.contains("encode_with_special")) {
      CHECK(tok.encode(texts[i].bytes, true) == ids_of(fx.at("encode_with_special")[i]));
    }
    const std::string decoded = round_trips[i].get<std::string>();
    CHECK(tok.decode(expected) == decoded);
    CHECK(stream_decode(tok, expected) == decoded);
    // decode(encode(s)) == s wherever the reference gives s back.
    if (decoded == reference_inputs[i]) {
      ++round_tripped;
      CHECK(tok.decode(tok.encode(reference_inputs[i], true)) == reference_inputs[i]);
    }
  }
  for (const auto& c : fx.at("decode")) {
    const std::vector<token_t> ids = ids_of(c.at("ids"));
    INFO("decode " << c.at("ids").dump());
    CHECK(tok.decode(ids) == c.at("text").get<std::string>());
    CHECK(stream_decode(tok, ids) == c.at("text").get<std::string>());
  }
  return round_tripped;
}

}  // namespace specdec::test
