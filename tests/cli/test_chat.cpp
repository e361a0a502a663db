// `specdec chat` and `specdec generate --chat` on the ChatML copy of the demo pair
// (tests/support/chat_model.hpp: <|im_start|> / <|im_end|> control tokens, <|im_end|> taking the
// newline's id so that answers end at an end-of-turn token that is not the EOS):
//   - a piped conversation: each later turn appends only the template's continuation (it starts
//     with <|im_end|>, the token the previous answer ended at), and the conversation's token
//     sequence equals the tokenization of the whole conversation;
//   - the answers over the reused KV cache are those of a fresh generation over the whole
//     conversation (the library, target only), and speculative decoding (draft model, n-gram)
//     gives the baseline's answers;
//   - generate --chat is the chat's first turn;
//   - the input rules (/exit, end of input, blank lines, a backslash continues a line), errors;
//   - Ctrl-C stops the current answer only; Ctrl-C at the prompt ends the chat (status 130).

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_model.hpp"
#include "child_process.hpp"
#include "cli_test_util.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

using nlohmann::json;
using specdec::ChatMessage;
using specdec::token_t;
using specdec::test::Child;
using specdec::test::read_file;
using specdec::test::run_cli;
namespace fs = std::filesystem;

namespace {

/// The ChatML copies of the demo pair, in the temp folder for the test's lifetime.
struct ChatPair {
  fs::path target = specdec::test::temp_path("-chat-target.gguf");
  fs::path draft = specdec::test::temp_path("-chat-draft.gguf");
  ChatPair() {
    specdec::test::write_chatml_model(specdec::test::demo_target(), target.string());
    specdec::test::write_chatml_model(specdec::test::demo_draft(), draft.string());
  }
  ~ChatPair() {
    fs::remove(target);
    fs::remove(draft);
  }
  ChatPair(const ChatPair&) = delete;
  ChatPair& operator=(const ChatPair&) = delete;
};

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j["messages"]) out.push_back({m["role"], m["content"]});
  return out;
}

std::vector<token_t> concat(std::vector<token_t> a, const std::vector<token_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// specdec chat with `args` on `input`; returns the --json-file object (and the run).
json chat(const ChatPair& pair, const std::vector<std::string>& args, const std::string& input,
          specdec::test::RunResult* run = nullptr) {
  const auto file = specdec::test::temp_path(".json");
  std::vector<std::string> all = {"chat", "-m", pair.target.string(), "--temp",     "0",
                                  "-t",   "1",  "--json-file",        file.string()};
  all.insert(all.end(), args.begin(), args.end());
  const auto r = run_cli(all, input);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json j = json::parse(read_file(file));
  fs::remove(file);
  if (run) *run = r;
  return j;
}

}  // namespace

TEST_CASE("chat: a piped conversation appends only each turn's continuation", "[cli][chat]") {
  const ChatPair pair;
  specdec::test::RunResult run;
  const json j = chat(pair, {"-md", pair.draft.string(), "-n", "40", "--system", "Be brief."},
                      "Hello there\n1 In the beginning\n/exit\nnever read\n", &run);
  const std::vector<ChatMessage> messages = messages_of(j);
  REQUIRE(messages.size() == 5);  // system, user, assistant, user, assistant
  CHECK(messages[0].role == "system");
  CHECK(messages[0].content == "Be brief.");
  CHECK(messages[1].content == "Hello there");
  CHECK(messages[3].content == "1 In the beginning");
  REQUIRE(j["turns"].size() == 2);
  CHECK(j["chat_template"] == "chatml");
  // stdout is the answers, each on its own line; the statistics go to stderr.
  CHECK(run.out == j["turns"][0]["text"].get<std::string>() + "\n" +
                       j["turns"][1]["text"].get<std::string>() + "\n");
  CHECK(specdec::test::Child::occurrences(run.err, "[draft model k=4]") == 2);

  const specdec::LoadedModel model = specdec::load_model(pair.target.string());
  const specdec::Tokenizer& tok = *model.tokenizer;
  const auto tmpl = specdec::ChatTemplate::for_model(model, std::nullopt);
  const token_t im_end = 13;
  // The first answer ended at <|im_end|> (the model's newline), not at the EOS </s>.
  CHECK(j["turns"][0]["stop_reason"] == "eos");
  // Turn 1: the whole template; turn 2: only the continuation, from the <|im_end|> that closes
  // the first answer (its stop token, which no cache holds yet).
  const std::span<const ChatMessage> all(messages);
  CHECK(j["turns"][0]["prompt_tokens"] ==
        specdec::tokenize_chat(tok, tmpl.render(all.first(2), true), true));
  const std::vector<token_t> continuation = j["turns"][1]["prompt_tokens"];
  CHECK(continuation == specdec::tokenize_chat(tok, tmpl.continuation(all.first(4)), false));
  REQUIRE(!continuation.empty());
  CHECK(continuation.front() == im_end);
  // The conversation's sequence (prompts and answers, what the caches hold) is the tokenization
  // of the whole conversation up to the last answer, then that answer's tokens.
  const std::vector<token_t> whole =
      specdec::tokenize_chat(tok, tmpl.render(all.first(4), true), true);
  CHECK(j["tokens"] == concat(whole, j["turns"][1]["tokens"].get<std::vector<token_t>>()));
  CHECK(j["turns"][1]["stats"]["prompt_tokens"] == continuation.size());
}

TEST_CASE(
    "chat: answers over the reused KV cache are a fresh generation's and speculative == baseline",
    "[cli][chat]") {
  const ChatPair pair;
  const std::string input = "Hello there\n1 In the beginning\ndef copy(x):\n";
  const json base = chat(pair, {"--baseline", "-n", "30"}, input);
  REQUIRE(base["turns"].size() == 3);

  // Each turn again, from scratch, on the whole conversation up to its user message: the same
  // tokens (greedy), so the continued caches held exactly what a fresh prefill gives.
  const specdec::LoadedModel model = specdec::load_model(pair.target.string());
  const auto tmpl = specdec::ChatTemplate::for_model(model, std::nullopt);
  const std::vector<ChatMessage> messages = messages_of(base);
  specdec::GenerationConfig config;
  config.max_new_tokens = 30;
  config.sampling.temperature = 0;
  config.stop_tokens = specdec::end_of_turn_tokens(tmpl, *model.tokenizer);
  specdec::cpu::Transformer lm(model, specdec::cpu::Options{.threads = 1});
  specdec::AutoregressiveDecoder decoder(lm, model.tokenizer.get());
  for (std::size_t t = 0; t < 3; ++t) {
    INFO("turn " << t);
    const auto prompt = specdec::tokenize_chat(
        *model.tokenizer,
        tmpl.render(std::span<const ChatMessage>(messages).first(2 * t + 1), true), true);
    const auto fresh = decoder.generate(prompt, config);
    CHECK(fresh.tokens == base["turns"][t]["tokens"].get<std::vector<token_t>>());
    CHECK(fresh.text == base["turns"][t]["text"].get<std::string>());
  }

  for (const std::vector<std::string>& drafter :
       {std::vector<std::string>{"-md", pair.draft.string()},
        std::vector<std::string>{"-md", pair.draft.string(), "--adaptive"},
        std::vector<std::string>{"--ngram", "3", "-k", "3"}}) {
    INFO(drafter.front());
    std::vector<std::string> args = drafter;
    args.insert(args.end(), {"-n", "30"});
    const json spec = chat(pair, args, input);
    CHECK(spec["messages"] == base["messages"]);
    CHECK(spec["tokens"] == base["tokens"]);
  }
}

TEST_CASE("chat: generate --chat is the chat's first turn", "[cli][chat]") {
  const ChatPair pair;
  const json first = chat(pair, {"-md", pair.draft.string(), "-n", "30"}, "Hello there\n");
  const auto r = run_cli({"generate", "-m", pair.target.string(), "-md", pair.draft.string(), "-p",
                          "Hello there", "--chat", "--temp", "0", "-t", "1", "-n", "30", "--json"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json g = json::parse(r.out);
  CHECK(g["chat_template"] == "chatml");
  CHECK(g["messages"] == json::array({{{"role", "user"}, {"content", "Hello there"}}}));
  CHECK(g["prompt_tokens"] == first["turns"][0]["prompt_tokens"]);
  CHECK(g["tokens"] == first["turns"][0]["tokens"]);
  CHECK(g["stop_reason"] == "eos");

  // Streamed: the answer alone (a chat prompt is not displayed), and --chat-template applies.
  const auto streamed =
      run_cli({"generate", "-m", pair.target.string(), "--baseline", "-p", "Hello there", "--chat",
               "--temp", "0", "-n", "30", "--system", "S"});
  REQUIRE(streamed.status == 0);
  CHECK(streamed.out.find("Hello there") == std::string::npos);
  const auto zephyr = run_cli({"generate", "-m", pair.target.string(), "--baseline", "-p", "Hi",
                               "--chat", "--chat-template", "zephyr", "-n", "4", "--json"});
  REQUIRE(zephyr.status == 0);
  CHECK(json::parse(zephyr.out)["chat_template"] == "zephyr");
}

TEST_CASE("chat input: /exit, end of input, blank lines, a backslash continues the line",
          "[cli][chat]") {
  const ChatPair pair;
  json j =
      chat(pair, {"--baseline", "-n", "8"}, "  \n\nfirst \\\nsecond\r\nlast line without newline");
  REQUIRE(j["turns"].size() == 2);
  CHECK(j["messages"][0]["content"] == "first \nsecond");
  CHECK(j["messages"][2]["content"] == "last line without newline");

  j = chat(pair, {"--baseline"}, "");
  CHECK(j["turns"].empty());
  CHECK(j["tokens"].empty());
  j = chat(pair, {"--baseline", "-sys", "You are terse."}, "/exit\nHello\n");
  CHECK(j["turns"].empty());
  CHECK(j["messages"] == json::array({{{"role", "system"}, {"content", "You are terse."}}}));
}

TEST_CASE("chat: errors name the problem and the flag", "[cli][chat]") {
  const ChatPair pair;
  // The demo models carry no template.
  auto r = run_cli({"chat", "-m", specdec::test::demo_target()}, "Hello\n");
  CHECK(r.status == 1);
  CHECK(r.err.find("no chat template") != std::string::npos);
  CHECK(r.err.find("--chat-template NAME") != std::string::npos);
  r = run_cli({"generate", "-m", specdec::test::demo_target(), "--baseline", "-p", "x", "--chat"});
  CHECK(r.status == 1);
  CHECK(r.err.find("--chat-template") != std::string::npos);

  r = run_cli({"chat", "-m", pair.target.string(), "--chat-template", "vicuna"}, "");
  CHECK(r.status == 2);
  CHECK(r.err.find("--chat-template") != std::string::npos);
  r = run_cli({"generate", "-m", pair.target.string(), "--baseline", "-p", "x", "--system", "S"});
  CHECK(r.status == 2);
  CHECK(r.err.find("--system applies to --chat") != std::string::npos);
  r = run_cli({"generate", "-m", pair.target.string(), "--baseline", "-p", "x", "-cnv"});
  CHECK(r.status == 2);
  CHECK(r.err.find("specdec chat") != std::string::npos);
  r = run_cli({"chat", "-m", pair.target.string(), "--chat-template-file", "t.jinja"}, "");
  CHECK(r.status == 2);
  CHECK(r.err.find("no Jinja engine") != std::string::npos);

  // A conversation past the context: the turn that does not fit is refused, status 1.
  r = run_cli({"chat", "-m", pair.target.string(), "--baseline", "-c", "24", "-n", "4"},
              "Hi\nAnd now a much longer message that cannot fit into the context at all\n");
  CHECK(r.status == 1);
  CHECK(r.err.find("does not fit the target's context of 24 positions") != std::string::npos);
  CHECK(r.err.find("larger -c") != std::string::npos);
}

TEST_CASE("chat: Ctrl-C stops the current answer only, Ctrl-C at the prompt ends the chat",
          "[cli][chat][interrupt]") {
  const ChatPair pair;
  const auto file = specdec::test::temp_path(".json");
  // --ignore-eos: the answers run to -n (thousands of tokens) unless interrupted.
  Child child({"chat", "-m", pair.target.string(), "-md", pair.draft.string(), "--ignore-eos", "-n",
               "3000", "-c", "8192", "--temp", "0.8", "--json-file", file.string()},
              true);
  child.write_stdin("Tell me a story\n");
  REQUIRE(child.read_at_least(1));  // the answer is streaming
  REQUIRE(kill(child.pid(), SIGINT) == 0);
  REQUIRE(child.wait_for_err("| stop: cancelled\n"));
  CHECK(child.err().find("this answer stops after the current round") != std::string::npos);

  // Back at the prompt: the next message is answered, and can be stopped the same way.
  child.drain_stdout();  // the first answer, whole (it was written before its statistics)
  const std::size_t before = child.out().size();
  child.write_stdin("Another one\n");
  REQUIRE(child.read_at_least(before + 1));
  REQUIRE(kill(child.pid(), SIGINT) == 0);
  REQUIRE(child.wait_for_err("| stop: cancelled\n", 2));
  // At the prompt, Ctrl-C ends the chat: status 130, the conversation written.
  REQUIRE(kill(child.pid(), SIGINT) == 0);
  CHECK(child.finish() == 130);
  const json j = json::parse(read_file(file));
  fs::remove(file);
  REQUIRE(j["turns"].size() == 2);
  for (const json& t : j["turns"]) {
    CHECK(t["stop_reason"] == "cancelled");
    CHECK(t["tokens"].size() < 3000);
  }
  CHECK(j["messages"].size() == 4);
  CHECK(child.out() == j["turns"][0]["text"].get<std::string>() + "\n" +
                           j["turns"][1]["text"].get<std::string>() + "\n");
  // The interrupted answer stays in the conversation as far as it got; the sequence goes on.
  std::size_t total = 0;
  for (const json& t : j["turns"]) total += t["prompt_tokens"].size() + t["tokens"].size();
  CHECK(j["tokens"].size() == total);
}

TEST_CASE("chat: SIGTERM ends the chat after the current round, the conversation written",
          "[cli][chat][interrupt]") {
  const ChatPair pair;
  const auto file = specdec::test::temp_path(".json");
  Child child({"chat", "-m", pair.target.string(), "-md", pair.draft.string(), "-n", "3", "--temp",
               "0", "--json-file", file.string()},
              true);
  child.write_stdin("Hi\n");  // a finished turn (3 tokens) ...
  REQUIRE(child.wait_for_err("[draft model k=4]"));
  child.drain_stdout();
  // ... and SIGTERM at the prompt (or while the next one is read): the chat ends, status 143,
  // the finished turn kept.
  REQUIRE(kill(child.pid(), SIGTERM) == 0);
  CHECK(child.finish() == 128 + SIGTERM);
  const json j = json::parse(read_file(file));
  fs::remove(file);
  REQUIRE(j["turns"].size() == 1);
  CHECK(j["turns"][0]["tokens"].size() <= 3);
  CHECK(j["messages"].size() == 2);
  CHECK(child.out() == j["turns"][0]["text"].get<std::string>() + "\n");
}

namespace {

/// specdec chat on a pseudo-terminal, as a person at a terminal runs it.
class TerminalChat {
 public:
  explicit TerminalChat(const std::vector<std::string>& args) {
    std::vector<std::string> argv_s = {SPECDEC_CLI};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (const int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
      setenv("NO_COLOR", "1", 1);
      setenv("TERM", "xterm", 1);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~TerminalChat() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(master_);
  }
  TerminalChat(const TerminalChat&) = delete;
  TerminalChat& operator=(const TerminalChat&) = delete;

  void type(const std::string& keys) {
    REQUIRE(::write(master_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
  }
  /// Reads the terminal until it has shown `text` `count` times in all.
  bool wait_for(const std::string& text, std::size_t count = 1) {
    return wait_until([&] { return Child::occurrences(screen_, text) >= count; });
  }
  /// Reads the terminal until `answers` answers have ended (their statistics line shown) and the
  /// prompt waits after the last: what is typed now goes to the line editor.
  bool wait_for_prompt(std::size_t answers) {
    return wait_until([&] {
      const std::size_t stats = screen_.rfind("| stop: ");
      return Child::occurrences(screen_, "| stop: ") >= answers &&
             screen_.find("> ", answers == 0 ? 0 : stats) != std::string::npos;
    });
  }
  template <class Done>
  bool wait_until(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + specdec::test::kPatience;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(master_, buffer, sizeof buffer);
      if (n <= 0) return false;
      screen_.append(buffer, static_cast<std::size_t>(n));
    }
    return true;
  }
  int finish() {
    (void)wait_until([] { return false; });  // to EOF (read fails once the child has gone)
    int status = 0;
    // Bounded: a child still running 10 s after its terminal went quiet is a failure that
    // shows the terminal (rather than a test that hangs until ctest's timeout).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (waitpid(pid_, &status, WNOHANG) != pid_) {
      if (std::chrono::steady_clock::now() > deadline)
        FAIL("specdec chat did not exit; the terminal showed:\n" << screen_);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  [[nodiscard]] const std::string& screen() const { return screen_; }

 private:
  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string screen_;
};

}  // namespace

TEST_CASE("chat on a terminal: line editing and the history of messages (libedit)", "[cli][chat]") {
  const ChatPair pair;
  const auto file = specdec::test::temp_path(".json");
  TerminalChat chat({"chat", "-m", pair.target.string(), "-md", pair.draft.string(), "-n", "2",
                     "--temp", "0", "--json-file", file.string()});
  REQUIRE(chat.wait_for_prompt(0));
  // "helo", Left, "l", Enter: the message is "hello" (the arrow moved the cursor; it did not
  // reach the model as "\x1b[D").
  chat.type("helo\x1b[Dl\r");
  REQUIRE(chat.wait_for_prompt(1));
  // Up recalls "hello"; Ctrl-A (start of line) and "oh " edit it: "oh hello".
  chat.type("\x1b[A\x01oh \r");
  REQUIRE(chat.wait_for_prompt(2));
  chat.type("\x04");  // Ctrl-D on an empty line ends the chat
  INFO(chat.screen());
  CHECK(chat.finish() == 0);
  const json j = json::parse(read_file(file));
  fs::remove(file);
  REQUIRE(j["messages"].size() == 4);
  CHECK(j["messages"][0]["content"] == "hello");
  CHECK(j["messages"][2]["content"] == "oh hello");
}

TEST_CASE("chat on a terminal: Ctrl-C at the prompt ends the chat, the conversation written",
          "[cli][chat][interrupt]") {
  const ChatPair pair;
  const auto file = specdec::test::temp_path(".json");
  TerminalChat chat({"chat", "-m", pair.target.string(), "-md", pair.draft.string(), "-n", "2",
                     "--temp", "0", "--json-file", file.string()});
  REQUIRE(chat.wait_for_prompt(0));
  chat.type("hi\r");
  REQUIRE(chat.wait_for_prompt(1));
  chat.type("half a messa");
  // Ctrl-C only once the editor has echoed the line: typed together, the terminal's SIGINT
  // flushes the input that poll() has just reported, and libedit's read of it then blocks
  // (about 1 run in 100 under load; a person's second key press ends that read).
  REQUIRE(chat.wait_for("half a messa"));
  chat.type("\x03");  // the terminal sends SIGINT: libedit leaves the signal keys to the terminal
  INFO(chat.screen());
  CHECK(chat.finish() == 130);
  const json j = json::parse(read_file(file));
  fs::remove(file);
  REQUIRE(j["messages"].size() == 2);  // the unfinished line is not a message
  CHECK(j["messages"][0]["content"] == "hi");
}
