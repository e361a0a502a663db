// Tokenizers built from GGUF metadata (tokenizer.ggml.*), through the model reader: the
// Llama-3-style byte-level BPE fixture GGUF and the pair's SentencePiece GGUF files must encode
// exactly like the reference tokenizers did.

#include <fstream>

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
