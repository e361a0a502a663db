// SentencePiece BPE against the `sentencepiece` library (fixtures by
// tools/make_tokenizer_fixtures.py), read_sentencepiece_model() on good and bad files, and the
// streaming detokenizer.

#include <fstream>
#include <random>

#include "fixtures.hpp"

using namespace specdec;
using specdec::test::TextCase;

namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> raw_inputs(const std::vector<TextCase>& texts) {
  std::vector<std::string> out;
  for (const auto& t : texts) out.push_back(t.bytes);  // sentencepiece was given the raw bytes
  return out;
}

// Protobuf wire format, to append fields to a model (later fields of a message merge into it).
std::string varint(std::uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string field_varint(int number, std::uint64_t v) {
  return varint(static_cast<std::uint64_t>(number) << 3) + varint(v);
}
std::string field_bytes(int number, const std::string& bytes) {
  return varint((static_cast<std::uint64_t>(number) << 3) | 2) + varint(bytes.size()) + bytes;
}

}  // namespace

TEST_CASE("SentencePiece BPE matches the sentencepiece library on every fixture model",
          "[tokenizer][spm]") {
  const auto texts = test::load_texts();
  const auto fixtures = test::load_json(test::tokenizer_data() / "spm-fixtures.json");
  for (const auto& [file, fx] : fixtures.at("models").items()) {
    DYNAMIC_SECTION(file) {
      const TokenizerSpec spec =
          read_sentencepiece_model((test::tokenizer_data() / "spm" / file).string());
      const auto tok = make_tokenizer(spec);
      CHECK(tok->vocab_size() == fx.at("vocab_size").get<std::size_t>());
      CHECK(tok->bos() == fx.at("bos").get<token_t>());
      CHECK(tok->eos() == fx.at("eos").get<token_t>());
      CHECK(spec.unk == fx.at("unk").get<token_t>());
      const int round_trips = test::check_against_fixtures(*tok, texts, fx, raw_inputs(texts));
      // The reference gives back most texts (not the invalid UTF-8 ones, nor unknown characters
      // without byte fallback): make sure the round-trip check ran.
      CHECK(round_trips >= 25);
      // Llama convention: <s> first (add_bos), the text's ids unchanged after it.
      for (std::size_t i = 0; i < texts.size(); ++i) {
        std::vector<token_t> expected{tok->bos()};
        const auto ids = test::ids_of(fx.at("encode")[i]);
        expected.insert(expected.end(), ids.begin(), ids.end());
        CHECK(tok->encode(texts[i].bytes, true) == expected);
      }
    }
  }
}

TEST_CASE("The pair's tokenizer.model encodes the eval prompts as the greedy reference did",
          "[tokenizer][spm]") {
  const auto pair = test::tinyllama_pair();
  if (pair.empty()) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  // Both copies: the shared one and the Hugging Face folder's (with tokenizer_config.json).
  for (const auto* file : {"tokenizer.model", "target-hf/tokenizer.model"}) {
    INFO(file);
    const auto tok = make_tokenizer(read_sentencepiece_model((pair / file).string()));
    std::ifstream in(pair / "greedy-reference.jsonl");
    int prompts = 0;
    std::ifstream prompts_in(pair / "eval-prompts.jsonl");
    for (std::string ref_line, prompt_line;
         std::getline(in, ref_line) && std::getline(prompts_in, prompt_line);) {
      const auto ref = nlohmann::json::parse(ref_line);
      const auto prompt = nlohmann::json::parse(prompt_line).at("text").get<std::string>();
      CHECK(tok->encode(prompt, true) == test::ids_of(ref.at("prompt_ids")));
      ++prompts;
    }
    CHECK(prompts == 40);
  }
  // The committed copy is the same file.
  CHECK(read_bytes(pair / "tokenizer.model") ==
        read_bytes(test::tokenizer_data() / "spm" / "tinyllama-pair.model"));
}

TEST_CASE("read_sentencepiece_model refuses what it does not implement", "[tokenizer][spm]") {
  const std::string model = read_bytes(test::tokenizer_data() / "spm" / "tinyllama-pair.model");
  const auto error_of = [](const std::string& bytes) -> std::string {
    try {
      (void)parse_sentencepiece_model(bytes, "test.model");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  using Catch::Matchers::Contains;
  // A normalizer_spec with a precompiled rule (as nmt_nfkc models have).
  CHECK_THAT(error_of(model + field_bytes(3, field_bytes(1, "nmt_nfkc") + field_bytes(2, "rules"))),
             Contains("test.model") && Contains("nmt_nfkc"));
  CHECK_THAT(error_of(model + field_bytes(2, field_varint(3, 1))), Contains("unigram"));
  CHECK_THAT(error_of(model + field_bytes(2, field_varint(24, 1))),
             Contains("treat_whitespace_as_suffix"));
  CHECK_THAT(error_of(model + field_bytes(3, field_varint(5, 0))), Contains("escape_whitespaces"));
  CHECK_THAT(error_of(model + field_bytes(5, field_bytes(2, "rules"))),
             Contains("denormalization"));
  CHECK_THAT(error_of(""), Contains("no pieces"));
  CHECK_THAT(error_of(model + field_bytes(1, field_bytes(1, "x") + field_varint(3, 9))),
             Contains("type 9"));
  CHECK_THAT(error_of(model + field_bytes(1, field_bytes(1, ""))), Contains("empty piece"));
  CHECK_THAT(error_of(model + "\x0a\xff\xff\xff\x0f"), Contains("past the end"));
  CHECK_THAT(error_of(model + "\x0b"), Contains("wire type 3"));
  CHECK_THAT(error_of(model + std::string(11, '\xff')), Contains("varint"));
  CHECK_THROWS_WITH(read_sentencepiece_model("/nonexistent/tokenizer.model"),
                    Contains("/nonexistent/tokenizer.model"));
}

TEST_CASE("read_sentencepiece_model never crashes on damaged files", "[tokenizer][spm]") {
  const std::string model = read_bytes(test::tokenizer_data() / "spm" / "tinyllama-pair.model");
  std::mt19937 rng(7);
  int parsed = 0, refused = 0;
  const auto attempt = [&](const std::string& bytes) {
    try {
      const auto tok = make_tokenizer(parse_sentencepiece_model(bytes, "damaged.model"));
      const auto ids = tok->encode("Hello, world!\n\tdef f(x): return x  # ok \xff", true);
      (void)tok->decode(ids);
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  };
  // Truncations (every length near the start, then spread over the file) and random byte flips.
  for (std::size_t len = 0; len < 300; ++len) attempt(model.substr(0, len));
  for (std::size_t len = 300; len < model.size(); len += 97) attempt(model.substr(0, len));
  for (int i = 0; i < 300; ++i) {
    std::string damaged = model;
    for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
      damaged[rng() % damaged.size()] = static_cast<char>(rng());
    }
    attempt(damaged);
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}

TEST_CASE("IncrementalDetokenizer streams exactly decode() for random id sequences",
          "[tokenizer][detokenizer]") {
  const auto tok = make_tokenizer(
      read_sentencepiece_model((test::tokenizer_data() / "spm" / "tinyllama-pair.model").string()));
  std::mt19937 rng(11);
  for (int seq = 0; seq < 300; ++seq) {
    std::vector<token_t> ids(1 + rng() % 40);
    // Half the sequences mostly byte tokens (ids 3-258 here), where characters span tokens.
    for (auto& id : ids)
      id = static_cast<token_t>(seq % 2 == 0 ? rng() % tok->vocab_size() : 3 + rng() % 256);
    INFO("sequence " << seq);
    CHECK(test::stream_decode(*tok, ids) == tok->decode(ids));
  }
  const std::vector<token_t> out_of_range{5, static_cast<token_t>(tok->vocab_size())};
  CHECK_THROWS_AS(tok->decode(out_of_range), Error);
  IncrementalDetokenizer detok(*tok);
  CHECK_THROWS_AS(detok.push(-1), Error);
}
