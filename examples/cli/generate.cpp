// specdec generate: one generation, streamed to stdout (or one JSON object with --json).
//
//   specdec generate -m TARGET [-md DRAFT | --ngram N | --baseline] (-p TEXT | -f FILE)
//                    [-n 128] [-k 4] [--draft-min 0] [--adaptive] [--temp 0.8] [--top-k 40]
//                    [--top-p 0.95] [--min-p 0.05] [--sampler-order llama|hf] [-s -1] [-t N]
//                    [-c N] [--backend cpu|cuda]
//                    [--chat [--system TEXT] [--chat-template NAME]] [--json] [--trace out.html]
//
// The flags are llama.cpp's where it has the same setting (docs/cli.md lists every one and its
// aliases). Ctrl-C stops the generation at the end of the current round and still prints the
// statistics and writes the trace and JSON (stop reason "cancelled"); a second Ctrl-C quits.

#include <cctype>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "args.hpp"
#include "chat.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "trace.hpp"

namespace specdec::cli {

namespace {

struct GenerateOptions : DecodeFlags {
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  bool escape = false;
  std::int64_t n_predict = 128;
  float temperature = 0.8f;
  SamplingFlags sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool special = false;
  std::optional<std::size_t> n_probs;  ///< --n-probs N: log-probabilities, N alternatives each
  ModelFlags models;
  bool json = false;
  std::optional<std::string> json_file;
  std::optional<std::string> trace;
  bool display_prompt = true;
  std::string colour = "auto";
  BackendFlag backend;
  bool chat = false;
  ChatFlags chat_flags;
};

/// llama.cpp's -e: \n, \r, \t, \', \", \\ and \xNN in the prompt become the characters.
std::string process_escapes(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\'':
      case '"':
      case '\\':
        out += c;
        break;
      case 'x':
        if (i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
          out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
          i += 2;
          break;
        }
        [[fallthrough]];
      default:  // not an escape: kept as typed
        out += '\\';
        out += c;
    }
  }
  return out;
}

std::string read_prompt(const GenerateOptions& o) {
  std::string text;
  if (o.prompt) {
    text = *o.prompt;
  } else {
    text = *o.prompt_file == "-" ? read_stdin() : read_text_file(*o.prompt_file);
    // As llama.cpp: the newline that ends the file's last line is not part of the prompt.
    if (!text.empty() && text.back() == '\n') text.pop_back();
  }
  return o.escape ? process_escapes(text) : text;
}

nlohmann::json rounds_json(const GenerationResult& result) {
  nlohmann::json rounds = nlohmann::json::array();
  for (std::size_t i = 0; i < result.rounds.size(); ++i) {
    const RoundRecord& r = result.rounds[i];
    nlohmann::json round = {{"position", r.position},
                            {"draft_length", r.draft_length},
                            {"drafted", r.drafted},
                            {"accepted", r.accepted},
                            {"rejected", r.rejected},
                            {"next", r.next},
                            {"bonus", r.bonus},
                            {"emitted", r.emitted},
                            {"draft_seconds", r.draft_seconds},
                            {"verify_seconds", r.verify_seconds},
                            {"sampling_seconds", r.sampling_seconds}};
    // p(x_i), q(x_i) of the drafted tokens (empty when the backend's sampler does not report
    // them: the CUDA one).
    round["p"] = r.p_drafted;
    round["q"] = r.q_drafted;
    if (!r.tree_parents.empty()) {  // a tree round (--suffix): the nodes' parents, the kept path
      round["tree_parents"] = r.tree_parents;
      round["accepted_nodes"] = r.accepted_nodes;
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

/// What run_generate() decided before loading any model.
struct GeneratePlan {
  Backend backend = Backend::cpu;
  DecodeSetup setup;
  std::string text;  ///< the prompt (with --chat: the user's message)
  std::string prompt_source;
};

/// The draft drafts only while the sequence fits its own cache (ModelDrafter::max_draft); past
/// that the target decodes alone. Say so before generating rather than let the speedup vanish
/// quietly.
void warn_if_draft_context_short(const GenerateOptions& o, std::size_t draft_context,
                                 std::size_t target_context, std::size_t prompt_tokens) {
  const std::size_t budget = token_budget(o.n_predict);
  const std::size_t reach =
      std::min(target_context, prompt_tokens + std::min(budget, target_context));
  if (draft_context >= reach) return;
  warn(fmt::format(
      "the draft's context holds {} positions but this generation may reach {} (prompt {} + "
      "-n {}{}): past position {} the target decodes alone, without drafts (give the draft "
      "more with -cd)",
      draft_context, reach, prompt_tokens, o.n_predict,
      o.n_predict < 0 ? ": until EOS or the context is full" : "", draft_context));
}

/// The library's settings of this generation, from the flags (and the chat template's stops).
GenerationConfig generation_config(const GenerateOptions& o,
                                   const std::optional<ChatFormat>& chat) {
  GenerationConfig config;
  config.max_new_tokens = token_budget(o.n_predict);
  config.sampling = o.sampling.params(o.temperature);
  config.penalties = o.sampling.penalties();
  config.seed = o.sampling.seed.resolve(/*announce=*/!config.sampling.greedy());
  config.stop_strings = o.stop;
  config.stop_at_eos = !o.ignore_eos;
  config.record_rounds = o.trace || o.json || o.json_file;
  config.special_tokens_as_text = o.special;
  if (o.n_probs) {
    config.logprobs = true;
    config.top_logprobs = *o.n_probs;
  }
  if (chat) chat->apply(config);
  return config;
}

/// What was run, for the JSON output and the trace's header.
nlohmann::json settings_json(const GenerateOptions& o, const GeneratePlan& plan,
                             const GenerationConfig& config, std::size_t target_context,
                             std::optional<std::size_t> draft_context,
                             const std::optional<ChatFormat>& chat) {
  const DecodeSetup& setup = plan.setup;
  const bool speculative = setup.drafter != DecodeSetup::Drafter::none;
  nlohmann::json settings = {{"mode", speculative ? "speculative" : "baseline"},
                             {"decoder", setup.label()},
                             {"backend", backend_name(plan.backend)},
                             {"target", o.target}};
  if (setup.uses_draft_model()) settings["draft"] = *o.draft;
  if (setup.drafter == DecodeSetup::Drafter::ngram) settings["ngram"] = setup.ngram;
  if (setup.uses_suffix()) settings["suffix_min_prob"] = setup.suffix_shape.min_score;
  if (setup.max_tree_nodes() > 0) settings["tree_nodes"] = setup.tree_nodes;
  if (setup.uses_model_trees()) {
    settings["tree_topk"] = setup.model_tree_shape.branch;
    settings["tree_depth"] = setup.model_tree_shape.max_depth;
  }
  if (speculative) {
    settings["k"] = o.adaptive ? nlohmann::json("adaptive") : nlohmann::json(o.k);
    if (o.adaptive) settings["max_k"] = setup.max_k;
    if (o.draft_min > 0) settings["draft_min"] = o.draft_min;
  }
  settings["temperature"] = as_typed(o.temperature);
  settings["top_k"] = o.sampling.top_k;
  settings["top_p"] = as_typed(o.sampling.top_p);
  settings["min_p"] = as_typed(o.sampling.min_p);
  settings["sampler_order"] = o.sampling.order;
  if (config.penalties.penalising()) {
    settings["repeat_penalty"] = as_typed(o.sampling.repeat_penalty);
    settings["repeat_last_n"] = o.sampling.repeat_last_n;
    settings["presence_penalty"] = as_typed(o.sampling.presence_penalty);
    settings["frequency_penalty"] = as_typed(o.sampling.frequency_penalty);
    settings["penalty_scope"] = o.sampling.penalty_scope;
  }
  if (!config.penalties.logit_bias.empty()) {
    nlohmann::json bias = nlohmann::json::array();
    for (const auto& b : config.penalties.logit_bias)  // -inf (a ban) as null: JSON has no inf
      bias.push_back(
          {b.token, std::isinf(b.bias) ? nlohmann::json() : nlohmann::json(as_typed(b.bias))});
    settings["logit_bias"] = bias;
  }
  settings["seed"] = config.seed;
  settings["max_new_tokens"] = o.n_predict;
  settings["context_length"] = target_context;
  if (draft_context) settings["draft_context_length"] = *draft_context;
  settings["kv_cache_type"] = o.models.cache_type_k;
  settings["repack_weights"] = o.models.repack;
  if (o.ignore_eos) settings["ignore_eos"] = true;
  if (o.special) settings["special"] = true;
  if (o.n_probs) settings["n_probs"] = *o.n_probs;
  if (chat) settings["chat_template"] = std::string(chat->tmpl.name());
  return settings;
}

/// --json's object: the settings, then what was generated.
nlohmann::json result_json(nlohmann::json out, const std::vector<ChatMessage>& messages,
                           const std::vector<token_t>& prompt, const GenerationConfig& config,
                           const GenerationResult& result, const Tokenizer* tokenizer,
                           bool speculative) {
  if (!messages.empty()) {
    out["messages"] = nlohmann::json::array();
    for (const ChatMessage& m : messages)
      out["messages"].push_back({{"role", m.role}, {"content", m.content}});
  }
  out["prompt_tokens"] = prompt;
  out["tokens"] = result.tokens;
  out["text"] = result.text;
  out["stop_reason"] = std::string(to_string(result.stop_reason));
  out["stats"] = stats_json(result.stats);
  if (config.logprobs) out["logprobs"] = logprobs_json(tokenizer, result.logprobs);
  if (speculative) out["rounds"] = rounds_json(result);
  return out;
}

/// Loads the models, decodes with the stream printer (or silently under --json) and writes what
/// was asked for: the statistics line, the trace, the JSON.
template <class LM>
void generate_on(const GenerateOptions& o, const GeneratePlan& plan,
                 std::optional<OutputFile>& trace_file, std::optional<OutputFile>& json_file) {
  const DecodeSetup& setup = plan.setup;
  const bool speculative = setup.drafter != DecodeSetup::Drafter::none;
  Model<LM> target = open_model<LM>(o.target, "target");
  check_penalties(o.sampling.penalties(), target.file);
  std::optional<Model<LM>> draft;
  if (setup.uses_draft_model()) draft = open_model<LM>(*o.draft, "draft");
  // With --chat the template is checked before the models take their memory.
  std::optional<ChatFormat> chat;
  if (o.chat) chat = chat_format(target.file, o.chat_flags);
  {
    std::vector<Model<LM>*> models = {&target};
    if (draft) models.push_back(&*draft);
    start_models<LM>(models, o.models);
  }
  if (draft) check_draft_compatible(target.file, draft->file);

  std::vector<ChatMessage> messages;
  std::vector<token_t> prompt;
  if (chat) {
    messages = first_messages(o.chat_flags, plan.text);
    prompt = tokenize_chat(target.tokenizer(), chat->tmpl.render(messages, true), true);
    check_prompt_fits(prompt.size(), target.lm->context_length(), plan.prompt_source);
  } else {
    prompt = encode_prompt(target, plan.text, plan.prompt_source);
  }
  const std::size_t target_context = target.lm->context_length();
  std::optional<std::size_t> draft_context;
  if (draft) draft_context = draft->lm->context_length();
  if (draft_context) warn_if_draft_context_short(o, *draft_context, target_context, prompt.size());
  const GenerationConfig config = generation_config(o, chat);

  Callbacks callbacks;
  std::optional<StreamPrinter> printer;
  if (!o.json) {
    // A chat answer is a new text, not a continuation of the prompt: it is not displayed.
    if (o.display_prompt && !chat)
      write_stdout(use_colour() ? "\x1b[2m" + plan.text + "\x1b[0m" : plan.text);
    printer.emplace(speculative);
    callbacks = printer->callbacks();
  }
  callbacks.should_stop = [] { return interrupted(); };
  const GenerationResult result =
      run_decode<LM>(target, draft ? &*draft : nullptr, setup, prompt, config, callbacks);
  if (printer) printer->finish();

  const nlohmann::json settings =
      settings_json(o, plan, config, target_context, draft_context, chat);
  if (!o.json && logs(LogLevel::info))
    fmt::print(stderr, "[{}] {}\n", setup.label(), stats_line(result, speculative));
  if (trace_file) {
    TraceInput input;
    input.title = "specdec generate: " + setup.label();
    input.settings = settings;
    input.prompt = prompt;
    input.tokenizer = target.file.tokenizer.get();
    input.result = &result;
    trace_file->write(trace_html(input));
    if (!o.json && logs(LogLevel::info))
      fmt::print(stderr, "trace written to {}\n", trace_file->path());
  }
  if (json_file || o.json) {
    const nlohmann::json out = result_json(settings, messages, prompt, config, result,
                                           target.file.tokenizer.get(), speculative);
    if (json_file) json_file->write(json_text(out));
    if (o.json) print_json(out);
  }
}

void run_generate(const GenerateOptions& o) {
  // Everything about the command line is checked before any model is loaded.
  if (!o.prompt && !o.prompt_file)
    throw UsageError("generate: give the prompt with -p TEXT or -f FILE (-f - reads stdin)");
  if (!o.chat && (o.chat_flags.system || o.chat_flags.chat_template))
    throw UsageError(fmt::format("generate: {} applies to --chat (or use specdec chat)",
                                 o.chat_flags.system ? "--system" : "--chat-template"));
  GeneratePlan plan;
  plan.setup = decode_setup_of(o, "generate");
  (void)o.models.kv_type();  // K and V types agree
  plan.backend = o.backend.resolve();
  // The default tree size fitted to the backend (the CUDA backend's trees are smaller), so that
  // the JSON and the trace report what runs.
  plan.setup = on_backend(
      plan.backend, [&]<class LM>(std::type_identity<LM>) { return plan.setup.fitted_to<LM>(); });
  set_colour_mode(o.colour == "on"    ? ColourMode::on
                  : o.colour == "off" ? ColourMode::off
                                      : ColourMode::automatic);
  std::optional<OutputFile> trace_file, json_file;
  if (o.trace) trace_file.emplace("--trace", *o.trace);
  if (o.json_file) json_file.emplace("--json-file", *o.json_file);

  const InterruptHandler interrupts;  // from here on, Ctrl-C ends the generation cleanly
  plan.text = read_prompt(o);
  plan.prompt_source =
      o.prompt ? std::string("--prompt")
               : "--file " + (*o.prompt_file == "-" ? std::string("(stdin)") : *o.prompt_file);
  on_backend(plan.backend, [&]<class LM>(std::type_identity<LM>) {
    generate_on<LM>(o, plan, trace_file, json_file);
  });
}

/// -f FILE, or - for stdin.
const CLI::Validator kPromptFile(
    [](std::string& s) -> std::string {
      if (s == "-") return {};
      std::error_code ec;
      if (std::filesystem::is_regular_file(s, ec)) return {};
      return "no such file: " + s;
    },
    "FILE|-", "prompt file");

}  // namespace

void add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd =
      app.add_subcommand("generate", "generate a continuation of a prompt, streamed to stdout");
  add_decode_flags(*cmd, *o,
                   {"target model (the output has its distribution): a .gguf file or a Hugging "
                    "Face folder",
                    "target-only decoding (the default when no -md or --ngram is given)"});

  auto* prompt = cmd->add_option("-p,--prompt", o->prompt,
                                 "the prompt text (BOS is added as the model expects)");
  auto* prompt_file =
      cmd->add_option("-f,--file,--prompt-file", o->prompt_file,
                      "read the prompt from a file (- : stdin); one final newline is dropped")
          ->check(kPromptFile);
  prompt->excludes(prompt_file);
  cmd->add_flag("-e,--escape,!--no-escape", o->escape,
                "process escapes in the prompt: \\n \\r \\t \\' \\\" \\\\ \\xNN (off by default)");
  cmd->add_flag("--display-prompt,!--no-display-prompt", o->display_prompt,
                "print the prompt before the generated text (on by default; not with --json)");

  cmd->add_option("-n,--n-predict,--predict,--max-tokens", o->n_predict,
                  "tokens to generate at most; -1: until EOS or the context is full")
      ->check(kTokenBudget)
      ->capture_default_str();

  cmd->add_option("--temp,--temperature", o->temperature, "temperature (0: greedy)")
      ->check(kTemperature)
      ->capture_default_str();
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("-r,--reverse-prompt,--stop", o->stop,
                  "stop when the text contains this string (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "do not stop at the end-of-sequence token (it is emitted like any other)");
  cmd->add_flag(
      "--special", o->special,
      "write control tokens (<|im_start|>, ...) into the text, as llama.cpp's --special (-sp)");
  cmd->add_option("--n-probs", o->n_probs,
                  "report each generated token's log-probability under the target and its N most "
                  "likely alternatives, in --json, --json-file and --trace")
      ->check(CLI::Range(std::size_t{0}, std::size_t{100}));

  add_model_flags(*cmd, o->models, true);
  add_backend_flag(*cmd, o->backend);
  cmd->add_flag("--chat", o->chat,
                "the prompt is a user message: apply the model's chat template (one turn; "
                "specdec chat for a conversation)");
  add_chat_flags(*cmd, o->chat_flags);

  cmd->add_flag("--json", o->json,
                "print one JSON object (tokens, text, stats, rounds) instead of streaming");
  cmd->add_option("--json-file", o->json_file,
                  "also write that JSON object to a file (the text still streams to stdout)");
  cmd->add_option("--trace", o->trace, "write an HTML page showing every round");
  cmd->add_option("--color", o->colour,
                  "colour the streamed text: on, off or auto (a terminal, NO_COLOR unset); "
                  "--color alone: on (-co)")
      ->expected(0, 1)
      ->check(CLI::IsMember({"on", "off", "auto", ""}));
  cmd->callback([o] {
    if (o->colour.empty()) o->colour = "on";  // --color without a value
    run_generate(*o);
  });
}

}  // namespace specdec::cli
