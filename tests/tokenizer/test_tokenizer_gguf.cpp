// Tokenizers built from GGUF metadata (tokenizer.ggml.*), through the model reader: the
// Llama-3-style byte-level BPE fixture GGUF and the pair's SentencePiece GGUF files must encode
// exactly like the reference tokenizers did.

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "fixtures.hpp"
#include "specdec/model/gguf.hpp"

using namespace specdec;

namespace {

std::shared_ptr<const Tokenizer> tokenizer_of_gguf(const std::filesystem::path& path) {
  const GgufFile gguf = read_gguf(path.string());
  const auto spec = gguf_tokenizer_spec(gguf);
  REQUIRE(spec.has_value());
  return make_tokenizer(*spec);
}

}  // namespace

TEST_CASE("A byte-level BPE GGUF (tokenizer.ggml.pre = llama-bpe) matches Hugging Face tokenizers",
          "[tokenizer][gguf]") {
  const auto texts = test::load_texts();
  const auto fixtures = test::load_json(test::tokenizer_data() / "bpe-fixtures.json");
  const auto& fx =
      fixtures.at("tokenizers").at(fixtures.at("gguf").at("same_as").get<std::string>());
  const auto tok =
      tokenizer_of_gguf(test::tokenizer_data() / fixtures.at("gguf").at("file").get<std::string>());
  CHECK(tok->vocab_size() == fx.at("vocab_size").get<std::size_t>());
  std::vector<std::string> inputs;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& replaced = fx.at("inputs_replaced")[i];
    inputs.push_back(replaced.is_null() ? texts[i].bytes : replaced.get<std::string>());
  }
  CHECK(test::check_against_fixtures(*tok, texts, fx, inputs) >= 60);
}

TEST_CASE("The pair's GGUF tokenizers match the sentencepiece library", "[tokenizer][gguf]") {
  const auto pair = test::tinyllama_pair();
  if (pair.empty()) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  const auto texts = test::load_texts();
  const auto fixtures = test::load_json(test::tokenizer_data() / "spm-fixtures.json");
  const auto& fx = fixtures.at("models").at("tinyllama-pair.model");
  std::vector<std::string> inputs;
  for (const auto& t : texts) inputs.push_back(t.bytes);
  for (const auto* file : {"target-f32.gguf", "draft-f32.gguf"}) {
    INFO(file);
    const auto tok = tokenizer_of_gguf(pair / file);
    CHECK(tok->bos() == 1);
    CHECK(tok->eos() == 2);
    CHECK(test::check_against_fixtures(*tok, texts, fx, inputs) >= 30);
    // The greedy reference's prompt ids (<s> + the sentencepiece ids of each eval prompt).
    std::ifstream refs(pair / "greedy-reference.jsonl"), prompts(pair / "eval-prompts.jsonl");
    for (std::string ref, prompt; std::getline(refs, ref) && std::getline(prompts, prompt);) {
      CHECK(tok->encode(nlohmann::json::parse(prompt).at("text").get<std::string>(), true) ==
            test::ids_of(nlohmann::json::parse(ref).at("prompt_ids")));
    }
  }
}

TEST_CASE("max_bytes_per_token bounds the bytes of every token encode() makes",
          "[tokenizer][gguf]") {
  // The bound lets a server refuse a prompt past its context without tokenizing it: it must hold
  // for every text, including the ones built to need few tokens.
  const auto fixtures = test::load_json(test::tokenizer_data() / "bpe-fixtures.json");
  std::vector<std::filesystem::path> files = {test::tokenizer_data() /
                                              fixtures.at("gguf").at("file").get<std::string>()};
  if (const auto pair = test::tinyllama_pair(); !pair.empty())
    files.push_back(pair / "target-f32.gguf");
  std::vector<std::string> texts;
  for (const auto& t : test::load_texts()) texts.push_back(t.bytes);
  texts.push_back(std::string(5000, ' '));
  texts.push_back(std::string(5000, '\n'));
  texts.push_back(std::string(5000, '='));
  texts.push_back("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8");  // Hangul jamo: one syllable in NFC
  std::mt19937 rng(7);
  std::string noise;
  for (int i = 0; i < 3000; ++i) noise.push_back(static_cast<char>(rng() & 0xFF));
  texts.push_back(noise);
  for (const auto& file : files) {
    INFO(file.filename().string());
    const auto tok = tokenizer_of_gguf(file);
    const std::optional<std::size_t> bound = tok->max_bytes_per_token();
    REQUIRE(bound.has_value());  // neither collapses spaces nor lacks byte fallback
    CHECK(*bound <= 256);        // and it is a useful bound
    std::vector<std::string> all = texts;
    for (std::size_t id = 0; id < tok->vocab_size(); ++id) {  // the longest tokens, repeated
      const std::string bytes = tok->token_bytes(static_cast<token_t>(id));
      if (bytes.size() + 2 >= *bound) all.push_back(bytes + bytes + bytes);
    }
    for (const std::string& text : all) {
      INFO(text.substr(0, 40));
      CHECK(tok->encode(text, false).size() * *bound >= text.size());
      CHECK(tok->encode_special(text, false).size() * *bound >= text.size());
    }
  }
}
