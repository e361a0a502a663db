// Chat templates against the official Jinja templates rendered by transformers
// (tests/data/model/chat/templates.json, tools/make_chat_fixtures.py), their tokenization (one
// BOS, special tokens parsed: tokens.json from the `tokenizers` library, and llama.cpp's
// SentencePiece rule), the KV-reuse continuation, and the template text the loaders read.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chat_model.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

using namespace specdec;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

const json& fixtures() {
  static const json j = read_json(test::test_data() / "model" / "chat" / "templates.json");
  return j;
}

std::vector<ChatMessage> conversation(const std::string& name) {
  for (const json& c : fixtures()["conversations"])
    if (c["name"] == name) {
      std::vector<ChatMessage> messages;
      for (const json& m : c["messages"])
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      return messages;
    }
  throw std::runtime_error("no conversation " + name);
}

/// The fixture template, as detected from its text and given its model's BOS / EOS texts.
ChatTemplate fixture_template(const json& t) {
  return ChatTemplate::detect(t["text"].get<std::string>())
      .with_special_tokens(t["bos_token"].get<std::string>(), t["eos_token"].get<std::string>());
}

std::string trimmed(std::string s) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!s.empty() && space(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && space(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

/// A temp file removed at the end of the scope.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& suffix)
      : path(fs::temp_directory_path() /
             fmt::format("specdec-chat-test-{}-{}{}", ::getpid(), counter()++, suffix)) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("chat templates: render() gives the bytes the official Jinja templates give", "[chat]") {
  std::size_t compared = 0, refused = 0;
  for (const json& t : fixtures()["templates"]) {
    const std::string source = t["source"];
    INFO(source);
    const ChatTemplate tmpl = fixture_template(t);
    CHECK(tmpl.name() == t["family"].get<std::string>());
    for (const json& c : t["cases"]) {
      const std::vector<ChatMessage> messages = conversation(c["conversation"]);
      const bool generation = c["add_generation_prompt"];
      INFO(c["conversation"].get<std::string>() << (generation ? " + generation prompt" : ""));
      if (c.contains("expected")) {
        CHECK(tmpl.render(messages, generation) == c["expected"].get<std::string>());
        ++compared;
      } else {  // the Jinja template raised: render() refuses too
        CHECK_THROWS_AS(tmpl.render(messages, generation), Error);
        ++refused;
      }
    }
  }
  CHECK(compared >= 200);
  CHECK(refused >= 20);
}

TEST_CASE("chat templates: detection, names and the errors naming --chat-template", "[chat]") {
  for (const std::string_view name : ChatTemplate::names()) {
    CHECK(ChatTemplate::named(name).name() == name);
    CHECK(ChatTemplate::detect(name).name() == name);  // a name is a template, as in llama.cpp
  }
  CHECK(ChatTemplate::names().size() == 8);
  CHECK_THROWS_WITH(ChatTemplate::named("vicuna"),
                    Catch::Contains("unknown chat template 'vicuna'") &&
                        Catch::Contains("chatml, llama3, llama3.1, llama2, mistral, gemma, phi3, "
                                        "zephyr"));
  CHECK_THROWS_WITH(
      ChatTemplate::detect("{% for m in messages %}USER: {{ m.content }}{% endfor %}"),
      Catch::Contains("--chat-template NAME"));
  // Look-alikes llama.cpp tells apart are refused by name, not rendered wrongly.
  CHECK_THROWS_WITH(ChatTemplate::detect("[SYSTEM_PROMPT]{{ x }}[/SYSTEM_PROMPT][INST]"),
                    Catch::Contains("v7") && Catch::Contains("--chat-template"));
  CHECK_THROWS_WITH(ChatTemplate::detect("<|im_start|>user<|im_sep|>"), Catch::Contains("Phi-4"));

  // The end-of-turn marks.
  CHECK(ChatTemplate::named("chatml").end_of_turn() == std::vector<std::string>{"<|im_end|>"});
  CHECK(ChatTemplate::named("llama3").end_of_turn() == std::vector<std::string>{"<|eot_id|>"});
  CHECK(ChatTemplate::named("gemma").end_of_turn() == std::vector<std::string>{"<end_of_turn>"});
  CHECK(ChatTemplate::named("phi3").end_of_turn() == std::vector<std::string>{"<|end|>"});
  CHECK(ChatTemplate::named("llama2").with_special_tokens("<s>", "<|eos|>").end_of_turn() ==
        std::vector<std::string>{"<|eos|>"});

  // named("gemma") is Gemma 3's template (a system message opens the first turn); a Gemma 1/2
  // template refuses a system message as its Jinja does.
  const std::vector<ChatMessage> with_system = {{"system", "S"}, {"user", "U"}};
  CHECK(ChatTemplate::named("gemma").render(with_system, true) ==
        "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n");
  CHECK_THROWS_WITH(ChatTemplate::named("mistral").render(with_system, true),
                    Catch::Contains("alternate"));
  CHECK_THROWS_WITH(ChatTemplate::named("chatml").render({{{"tool", "x"}}}, true),
                    Catch::Contains("role 'tool'"));
}

TEST_CASE("chat templates: Llama 3.2's strftime_now date is today's", "[chat]") {
  std::string text;
  for (const json& t : fixtures()["templates"])
    if (t["family"] == "llama3.1") text = t["text"];
  REQUIRE(!text.empty());
  // Llama 3.2 / 3.3: the date comes from strftime_now("%d %b %Y") when the template asks for it.
  const std::string with_strftime = "{%- if strftime_now is defined %}" + text;
  char today[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(today, sizeof today, "%d %b %Y", &local);
  const std::string rendered = ChatTemplate::detect(with_strftime).render({{{"user", "hi"}}}, true);
  CHECK(rendered.find(std::string("Today Date: ") + today + "\n") != std::string::npos);
  CHECK(ChatTemplate::detect(text).render({{{"user", "hi"}}}, true).find("26 Jul 2024") !=
        std::string::npos);
}

TEST_CASE("chat templates: continuation() is what follows the answer in the whole conversation",
          "[chat]") {
  // For every template and every assistant answer followed by a user turn: the text of the whole
  // conversation is the prompt of that answer's turn, the answer (as the template writes it),
  // then continuation() — which starts with the end-of-turn mark. This is what lets a chat append
  // only the continuation's tokens to a KV cache holding the prompt and the generated answer.
  std::size_t checked = 0;
  for (const json& t : fixtures()["templates"]) {
    INFO(t["source"].get<std::string>());
    const ChatTemplate tmpl = fixture_template(t);
    for (const char* name : {"multi_turn", "multi_turn_system", "whitespace", "answer_last"}) {
      const std::vector<ChatMessage> all = conversation(name);
      INFO(name);
      for (std::size_t a = 0; a + 1 < all.size(); ++a) {
        if (all[a].role != "assistant") continue;
        const std::span<const ChatMessage> upto(all.data(), a + 2);
        std::string prompt, full;
        try {
          full = tmpl.render(upto, true);
        } catch (const Error&) {
          continue;  // a conversation this template refuses (a system message for Mistral)
        }
        prompt = tmpl.render(std::span<const ChatMessage>(all.data(), a), true);
        const std::string cont = tmpl.continuation(upto);
        REQUIRE(full.starts_with(prompt));
        REQUIRE(full.ends_with(cont));
        REQUIRE(full.size() >= prompt.size() + cont.size());
        CHECK(cont.starts_with(tmpl.end_of_turn().front()));
        const std::string answer =
            full.substr(prompt.size(), full.size() - prompt.size() - cont.size());
        CHECK(trimmed(answer) == trimmed(all[a].content));
        ++checked;
      }
    }
  }
  CHECK(checked >= 30);
  CHECK_THROWS_WITH(ChatTemplate::named("chatml").continuation(conversation("user")),
                    Catch::Contains("assistant answer followed by another message"));
}

TEST_CASE("chat tokenization: one BOS, as transformers' apply_chat_template(tokenize=True)",
          "[chat]") {
  // The byte-level fixture tokenizer adds BOS (TemplateProcessing) and the Llama 3 template
  // writes <|begin_of_text|>: tokenize_chat must hold one BOS (the `tokenizers` ids of the text
  // without special tokens), where a plain encode() holds two (the recorded with-special ids).
  const json cases = read_json(test::test_data() / "model" / "chat" / "tokens.json")["cases"];
  REQUIRE(cases.size() >= 3);
  const auto tokenizer = make_tokenizer(read_hf_tokenizer_json(
      (test::test_data() / "tokenizer" / "llama3-bpe" / "tokenizer.json").string()));
  for (const json& c : cases) {
    INFO(c["conversation"].get<std::string>());
    const std::string text = c["text"];
    const std::vector<token_t> expected = c["ids"];
    CHECK(tokenize_chat(*tokenizer, text, true) == expected);
    CHECK(tokenizer->encode(text, true) ==
          c["ids_with_special_tokens"].get<std::vector<token_t>>());
    CHECK(std::count(expected.begin(), expected.end(), tokenizer->bos()) == 1);
    // Rendered for the same tokenizer, the template's BOS text is the tokenizer's BOS piece.
    CHECK(text.starts_with(tokenizer->token_piece(tokenizer->bos())));
  }
}

TEST_CASE("chat tokenization: SentencePiece special tokens as llama.cpp parses them", "[chat]") {
  // The ChatML fixture model (tests/support/chat_model.hpp) on the demo target.
  TempFile file(".gguf");
  test::write_chatml_model((fs::path(SPECDEC_REPO_ROOT) / "models" / "target-q8_0.gguf").string(),
                           file.path.string());
  const LoadedModel model = load_model(file.path.string());
  REQUIRE(model.chat_template == std::string(test::kChatmlTemplate));
  const Tokenizer& tok = *model.tokenizer;
  const token_t bos = tok.bos(), eos = tok.eos(), im_end = 13;
  const auto im_start = static_cast<token_t>(tok.vocab_size() - 1);
  REQUIRE(tok.token_piece(im_end) == "<|im_end|>");
  REQUIRE(tok.token_piece(im_start) == "<|im_start|>");

  const ChatTemplate tmpl = ChatTemplate::for_model(model, std::nullopt);
  CHECK(tmpl.name() == "chatml");
  CHECK(tmpl.bos_token() == "<s>");
  CHECK(tmpl.eos_token() == "</s>");
  CHECK(end_of_turn_tokens(tmpl, tok) == std::vector<token_t>{im_end});
  CHECK(ChatTemplate::for_model(model, "zephyr").name() == "zephyr");

  // llama.cpp (llm_tokenizer_spm with parse_special): BOS, then each stretch of text between
  // special tokens tokenized on its own, with the dummy-prefix space.
  const auto text = [&](std::string_view s) { return tok.encode(s, false); };
  const auto cat = [](std::vector<std::vector<token_t>> parts) {
    std::vector<token_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const std::string prompt = tmpl.render({{{"user", "Hi there"}}}, true);
  CHECK(prompt == "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  CHECK(tokenize_chat(tok, prompt, true) == cat({{bos, im_start},
                                                 text("user\nHi there"),
                                                 {im_end},
                                                 text("\n"),
                                                 {im_start},
                                                 text("assistant\n")}));
  // Without parse_special the same text is plain characters: the special pieces are not found.
  const std::vector<token_t> plain = tok.encode(prompt, true);
  CHECK(std::find(plain.begin(), plain.end(), im_start) == plain.end());
  // A continuation gets no BOS.
  CHECK(tokenize_chat(tok, "<|im_end|>\n", false) == cat({{im_end}, text("\n")}));

  // Llama 2 on the same tokenizer: its template writes <s> before every [INST] and </s> after
  // every answer. The tokenizer adds BOS, so the first <s> text is dropped (one BOS, not two);
  // those inside the history become BOS / EOS ids.
  const ChatTemplate llama2 = ChatTemplate::named("llama2");
  const std::vector<ChatMessage> messages = {
      {"system", "Be kind."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  const std::string rendered = llama2.render(messages, true);
  REQUIRE(rendered.starts_with("<s>[INST] <<SYS>>"));
  CHECK(tokenize_chat(tok, rendered, true) ==
        cat({{bos},
             text("[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello "),
             {eos, bos},
             text("[INST] Bye [/INST]")}));
}

TEST_CASE("chat templates: the loaders read tokenizer.chat_template and tokenizer_config.json",
          "[chat]") {
  // The demo models carry no template: for_model names --chat-template.
  const LoadedModel demo =
      load_model((fs::path(SPECDEC_REPO_ROOT) / "models" / "target-q8_0.gguf").string());
  CHECK(!demo.chat_template);
  CHECK_THROWS_WITH(ChatTemplate::for_model(demo, std::nullopt),
                    Catch::Contains("no chat template") && Catch::Contains("--chat-template"));
  CHECK(ChatTemplate::for_model(demo, "llama2").name() == "llama2");
  CHECK_THROWS_WITH(ChatTemplate::for_model(demo, "nope"),
                    Catch::Contains("unknown chat template"));

  // A Hugging Face folder: the "chat_template" string, a list with "default", chat_template.jinja.
  TempFile dir("-hf");
  fs::copy(test::test_data() / "model" / "tiny-llama3-hf", dir.path);
  const auto write = [&](const char* name, const std::string& body) {
    std::ofstream(dir.path / name) << body;
  };
  CHECK(!load_model(dir.path.string()).chat_template);
  write("chat_template.jinja", "{{ bos_token }}<start_of_turn>");
  CHECK(load_model(dir.path.string()).chat_template == "{{ bos_token }}<start_of_turn>");
  write("tokenizer_config.json", json{{"chat_template", test::kChatmlTemplate}}.dump());
  CHECK(load_model(dir.path.string()).chat_template == std::string(test::kChatmlTemplate));
  write("tokenizer_config.json",
        json{{"chat_template", json::array({{{"name", "tool_use"}, {"template", "x"}},
                                            {{"name", "default"}, {"template", "<|im_start|>"}}})}}
            .dump());
  CHECK(load_model(dir.path.string()).chat_template == "<|im_start|>");
  write("tokenizer_config.json", json{{"chat_template", 3}}.dump());
  CHECK_THROWS_WITH(load_model(dir.path.string()),
                    Catch::Contains("tokenizer_config.json") && Catch::Contains("chat_template"));
}
