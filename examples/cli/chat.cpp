// specdec chat: an interactive conversation with a chat model, speculative (or target-only) and
// streamed, in the model's chat template.
//
//   specdec chat -m TARGET [-md DRAFT | --ngram N | --baseline] [--system TEXT]
//                [--chat-template NAME] [-n -1] [--temp 0.8] [-s 0] [-c N] [--backend cpu|cuda]
//                [--json-file F]
//
// Each line read from stdin is a user message (a line ending with \ continues on the next);
// /exit or the end of the input ends the chat. The answer streams to stdout. Ctrl-C stops the
// current answer (it stays in the conversation as far as it got) and returns to the prompt;
// Ctrl-C at the prompt ends the chat (exit status 130).
//
// KV reuse. The decoder keeps one sequence for the whole conversation: the first turn is the
// tokenized template of [system,] user; each later turn appends only the tokens of the template's
// continuation — from the end-of-turn mark that closes the previous answer (the model stopped at
// that token, which no cache holds yet) to the next assistant header — with the decoder's
// continue_with, so the conversation so far is never prefilled again. docs/cli.md ("specdec
// chat") says where this sequence can differ from tokenizing the whole conversation at once.

#include "chat.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "line_input.hpp"
#include "options.hpp"

namespace specdec::cli {

// ------------------------------------------------------------------------ the chat format

void add_chat_flags(CLI::App& cmd, ChatFlags& flags) {
  const std::vector<std::string_view> names = ChatTemplate::names();
  cmd.add_option("--system,--system-prompt", flags.system, "the system message (-sys)");
  cmd.add_option(
         "--chat-template", flags.chat_template,
         fmt::format("the chat format instead of the model's template: {}", fmt::join(names, ", ")))
      ->check(CLI::IsMember(std::vector<std::string>(names.begin(), names.end())));
}

void ChatFormat::apply(GenerationConfig& config) const {
  // --ignore-eos (stop_at_eos off) ignores the end-of-turn tokens too, as llama.cpp's ignores
  // every end-of-generation token; the library's stop_tokens would still apply.
  if (config.stop_at_eos)
    config.stop_tokens.insert(config.stop_tokens.end(), end_tokens.begin(), end_tokens.end());
  config.stop_strings.insert(config.stop_strings.end(), stop_strings.begin(), stop_strings.end());
}

ChatFormat chat_format(const LoadedModel& target, const ChatFlags& flags) {
  ChatFormat format{ChatTemplate::for_model(target, flags.chat_template), {}, {}};
  if (!target.tokenizer)
    throw Error(target.source + ": the model file carries no tokenizer, so it cannot chat");
  format.end_tokens = end_of_turn_tokens(format.tmpl, *target.tokenizer);
  // A mark the tokenizer has no single token for (a template chosen for a model that was not
  // trained on it) can still end the answer as text.
  for (const std::string& mark : format.tmpl.end_of_turn()) {
    const auto ids = target.tokenizer->encode_special(mark, false);
    const bool is_token =
        ids.size() == 1 && std::find(format.end_tokens.begin(), format.end_tokens.end(), ids[0]) !=
                               format.end_tokens.end();
    const bool is_eos = ids.size() == 1 && ids[0] == target.tokenizer->eos();
    if (!is_token && !is_eos) format.stop_strings.push_back(mark);
  }
  return format;
}

std::vector<ChatMessage> first_messages(const ChatFlags& flags, std::string user) {
  std::vector<ChatMessage> messages;
  if (flags.system) messages.push_back({"system", *flags.system});
  messages.push_back({"user", std::move(user)});
  return messages;
}

// ------------------------------------------------------------------------ specdec chat

namespace {

struct ChatOptions : DecodeFlags {
  std::int64_t n_predict = -1;
  float temperature = 0.8f;
  SamplingFlags sampling;
  bool ignore_eos = false;
  bool special = false;
  ModelFlags models;
  BackendFlag backend;
  ChatFlags chat;
  std::optional<std::string> json_file;
  std::string colour = "auto";
};

constexpr const char* kAnswerNote =
    "\nspecdec: interrupted: this answer stops after the current round (Ctrl-C again to quit at "
    "once)\n";
constexpr const char* kPromptNote = "\n";

nlohmann::json messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::json out = nlohmann::json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

template <class LM>
void chat_on(const ChatOptions& o, Backend backend, const DecodeSetup& setup,
             std::optional<OutputFile>& json_file) {
  const bool speculative = setup.drafter != DecodeSetup::Drafter::none;
  Model<LM> target = open_model<LM>(o.target, "target");
  check_penalties(o.sampling.penalties(), target.file);
  std::optional<Model<LM>> draft;
  if (setup.uses_draft_model()) draft = open_model<LM>(*o.draft, "draft");
  const ChatFormat format = chat_format(target.file, o.chat);  // before the caches are allocated
  {
    std::vector<Model<LM>*> models = {&target};
    if (draft) models.push_back(&*draft);
    start_models<LM>(models, o.models);
  }
  if (draft) check_draft_compatible(target.file, draft->file);
  const Tokenizer& tokenizer = target.tokenizer();
  const std::size_t context = target.lm->context_length();

  GenerationConfig config;
  config.max_new_tokens = token_budget(o.n_predict);
  config.sampling = o.sampling.params(o.temperature);
  config.penalties = o.sampling.penalties();
  config.seed = o.sampling.seed.resolve(/*announce=*/!config.sampling.greedy());
  config.stop_at_eos = !o.ignore_eos;
  config.special_tokens_as_text = o.special;
  format.apply(config);

  Decoder<LM> decoder(target, draft ? &*draft : nullptr, setup);
  const bool terminal = isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0;
  if (terminal)
    fmt::print(
        stderr,
        "specdec chat: {} ({} template), {} on {}. Enter a message (Up/Down: earlier ones); a "
        "line ending with \\ continues it. /exit or Ctrl-D ends the chat, Ctrl-C stops an "
        "answer.\n",
        o.target, format.tmpl.name(), setup.label(), backend_name(backend));

  std::vector<ChatMessage> messages;
  if (o.chat.system) messages.push_back({"system", *o.chat.system});
  nlohmann::json turns = nlohmann::json::array();
  const auto write_json = [&] {
    if (!json_file) return;
    nlohmann::json out = {{"backend", backend_name(backend)},
                          {"decoder", setup.label()},
                          {"target", o.target},
                          {"chat_template", std::string(format.tmpl.name())},
                          {"seed", config.seed},
                          {"context_length", context}};
    if (draft) out["draft"] = *o.draft;
    out["messages"] = messages_json(messages);
    out["tokens"] = decoder.sequence();
    out["turns"] = turns;
    json_file->write(json_text(out));
  };

  // On a terminal the prompt is libedit's (\1...\2: bytes that take no column).
  LineInput reader(use_colour() ? "\1\x1b[1m\2> \1\x1b[0m\2" : "> ", "... ");
  std::string text;
  reset_interrupts(kPromptNote);
  while (true) {
    const LineInput::Status status = reader.next(text);
    if (status != LineInput::Status::line || text == "/exit") break;  // interrupted: status 130
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) continue;

    messages.push_back({"user", text});
    const bool first = turns.empty();
    // The first turn is the whole template; a later one only what follows the last answer.
    const std::vector<token_t> tokens =
        first ? tokenize_chat(tokenizer, format.tmpl.render(messages, true), true)
              : tokenize_chat(tokenizer, format.tmpl.continuation(messages), false);
    const std::size_t held = first ? 0 : decoder.sequence().size();
    if (held + tokens.size() >= context) {
      messages.pop_back();
      write_json();
      throw Error(fmt::format(
          "the conversation ({} tokens with this message) does not fit the target's context of "
          "{} positions: start again with a larger -c",
          held + tokens.size(), context));
    }

    reset_interrupts(kAnswerNote);  // from here Ctrl-C stops this answer only
    StreamPrinter printer(speculative);
    Callbacks callbacks = printer.callbacks();
    callbacks.should_stop = [] { return interrupted(); };
    const GenerationResult result = first ? decoder.generate(tokens, config, callbacks)
                                          : decoder.continue_with(tokens, config, callbacks);
    reset_interrupts(kPromptNote);  // the answer is over: from here Ctrl-C ends the chat
    printer.finish();
    if (logs(LogLevel::info))
      fmt::print(stderr, "[{}] {}\n", setup.label(), stats_line(result, speculative));
    messages.push_back({"assistant", result.text});
    turns.push_back({{"prompt_tokens", tokens},
                     {"tokens", result.tokens},
                     {"text", result.text},
                     {"stop_reason", std::string(to_string(result.stop_reason))},
                     {"stats", stats_json(result.stats)}});
    if (result.stop_reason == StopReason::context_full) {
      write_json();
      throw Error(fmt::format(
          "the conversation filled the target's context of {} positions: start again with a "
          "larger -c",
          context));
    }
    if (terminating()) break;  // SIGTERM / SIGHUP: the conversation so far is written
  }
  write_json();
}

void run_chat(const ChatOptions& o) {
  const DecodeSetup setup = decode_setup_of(o, "chat");
  (void)o.models.kv_type();
  const Backend backend = o.backend.resolve();
  set_colour_mode(o.colour == "on"    ? ColourMode::on
                  : o.colour == "off" ? ColourMode::off
                                      : ColourMode::automatic);
  std::optional<OutputFile> json_file;
  if (o.json_file) json_file.emplace("--json-file", *o.json_file);
  const InterruptHandler interrupts(kPromptNote);
  on_backend(backend, [&]<class LM>(std::type_identity<LM>) {
    chat_on<LM>(o, backend, setup.fitted_to<LM>(), json_file);
  });
}

}  // namespace

void add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "chat with a model in its chat template: streamed answers, speculative decoding");
  add_decode_flags(*cmd, *o,
                   {"the chat model (target): a .gguf file or a Hugging Face folder",
                    "target-only decoding (the default when no -md or --ngram is given)"});
  add_chat_flags(*cmd, o->chat);
  cmd->add_option("-n,--n-predict,--predict,--max-tokens", o->n_predict,
                  "tokens per answer at most; -1: until the end of the turn or a full context")
      ->check(kTokenBudget)
      ->capture_default_str();
  cmd->add_option("--temp,--temperature", o->temperature, "temperature (0: greedy)")
      ->check(kTemperature)
      ->capture_default_str();
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "do not stop at the end-of-sequence or end-of-turn token");
  cmd->add_flag("--special", o->special,
                "write control tokens into the answers' text, as llama.cpp's --special");
  add_model_flags(*cmd, o->models, true);
  add_backend_flag(*cmd, o->backend);
  cmd->add_option("--json-file", o->json_file,
                  "write the conversation (messages, tokens, each turn's statistics) to a file at "
                  "the end");
  cmd->add_option("--color", o->colour, "colour the streamed text: on, off or auto (-co)")
      ->expected(0, 1)
      ->check(CLI::IsMember({"on", "off", "auto", ""}));
  cmd->callback([o] {
    if (o->colour.empty()) o->colour = "on";
    run_chat(*o);
  });
}

}  // namespace specdec::cli
