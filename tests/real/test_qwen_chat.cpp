// Chat on the real Qwen2.5-Coder instruct pair (label real-models; SKIPPED without the files):
//   - the GGUF's template is detected as ChatML with Qwen's default system message, its
//     <|im_end|> (the tokenizer's EOS here) ends a turn, and a rendered conversation tokenizes
//     with one special id per ChatML mark;
//   - `specdec chat` (1.5B target, 0.5B draft, the official Q4_K_M files, greedy) over three
//     piped turns: each later turn appends only the continuation (from <|im_end|>), the
//     conversation's token sequence equals the tokenization of the whole conversation, and every
//     answer equals a fresh target-only generation over the whole conversation up to its question
//     (the reused caches held what a prefill gives).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#if defined(SPECDEC_CLI)
#include "cli_test_util.hpp"
#endif
#include "qwen_files.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

using nlohmann::json;
using specdec::ChatMessage;
using specdec::token_t;
using specdec::test::official;

TEST_CASE("qwen chat: the template, its end of turn and its special tokens", "[real][chat]") {
  specdec::test::require_models();
  const specdec::LoadedModel model = specdec::load_model(official("1.5b").string());
  const auto tmpl = specdec::ChatTemplate::for_model(model, std::nullopt);
  CHECK(tmpl.name() == "chatml");
  const specdec::Tokenizer& tok = *model.tokenizer;
  const token_t im_start = 151644, im_end = 151645;
  CHECK(tok.eos() == im_end);
  CHECK(specdec::end_of_turn_tokens(tmpl, tok) == std::vector<token_t>{im_end});
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  const std::string text = tmpl.render(messages, true);
  CHECK(text ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<token_t> ids = specdec::tokenize_chat(tok, text, true);
  CHECK(std::count(ids.begin(), ids.end(), im_start) == 3);
  CHECK(std::count(ids.begin(), ids.end(), im_end) == 2);
  CHECK(ids.front() == im_start);  // Qwen adds no BOS
}

#if defined(SPECDEC_CLI)  // built with the CLI
TEST_CASE("qwen chat: KV reuse across turns equals the whole conversation, answer by answer",
          "[real][chat]") {
  specdec::test::require_models();
  specdec::test::skip_under_sanitizer();
  // The official Q4_K_M files as downloaded (the CPU backend computes on their K-quant blocks).
  const std::filesystem::path target_file = official("1.5b"), draft_file = official("0.5b");
  const auto file = specdec::test::temp_path(".json");
  const auto r = specdec::test::run_cli(
      {"chat", "-m", target_file.string(), "-md", draft_file.string(), "--temp", "0", "-n", "40",
       "-t", "2", "-c", "1024", "--system",
       "You are a helpful assistant. Answer in one short sentence.", "--json-file", file.string()},
      std::string("What is the capital of France?\nAnd of Italy?\n"
                  "Write a Python expression that adds 2 and 3.\n"));
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json j = json::parse(specdec::test::read_file(file));
  std::filesystem::remove(file);
  REQUIRE(j["turns"].size() == 3);
  std::vector<ChatMessage> messages;
  for (const json& m : j["messages"]) messages.push_back({m["role"], m["content"]});
  REQUIRE(messages.size() == 7);

  const specdec::LoadedModel model = specdec::load_model(target_file.string());
  const specdec::Tokenizer& tok = *model.tokenizer;
  const auto tmpl = specdec::ChatTemplate::for_model(model, std::nullopt);
  const std::span<const ChatMessage> all(messages);
  for (std::size_t t = 1; t < 3; ++t) {
    const std::vector<token_t> continuation = j["turns"][t]["prompt_tokens"];
    CHECK(continuation ==
          specdec::tokenize_chat(tok, tmpl.continuation(all.first(2 * t + 2)), false));
    CHECK(continuation.front() == 151645);  // <|im_end|>, where the previous answer stopped
  }
  // The sequence the caches hold is the tokenization of the whole conversation.
  std::vector<token_t> whole = specdec::tokenize_chat(tok, tmpl.render(all.first(6), true), true);
  const std::vector<token_t> last = j["turns"][2]["tokens"];
  whole.insert(whole.end(), last.begin(), last.end());
  CHECK(j["tokens"] == whole);

  // Each answer again from a fresh prefill of the conversation up to its question.
  specdec::cpu::Options options;
  options.threads = 2;
  options.context_length = 1024;
  specdec::cpu::Transformer target(model, options);
  specdec::AutoregressiveDecoder decoder(target, &tok);
  specdec::GenerationConfig config;
  config.max_new_tokens = 40;
  config.sampling.temperature = 0;
  config.stop_tokens = specdec::end_of_turn_tokens(tmpl, tok);
  for (std::size_t t = 0; t < 3; ++t) {
    INFO("turn " << t << ": " << j["turns"][t]["text"].get<std::string>());
    const auto fresh = decoder.generate(
        specdec::tokenize_chat(tok, tmpl.render(all.first(2 * t + 2), true), true), config);
    CHECK(fresh.tokens == j["turns"][t]["tokens"].get<std::vector<token_t>>());
  }
}
#endif
