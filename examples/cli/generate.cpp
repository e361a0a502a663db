// specdec generate: one generation, streamed to stdout (or one JSON object with --json).
//
//   specdec generate --target T [--draft D | --ngram N] (--prompt TEXT | --prompt-file F)
//                    [-n 128] [-k 4] [--adaptive] [--temp 0.8] [--top-k 0] [--top-p 1]
//                    [--min-p 0] [--seed 0] [--threads N] [--baseline] [--json] [--trace out.html]

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "trace.hpp"

namespace specdec::cli {

namespace {

struct GenerateOptions {
  std::string target;
  std::optional<std::string> draft;
  std::optional<std::size_t> ngram;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  std::size_t max_new_tokens = 128;
  std::size_t k = 4;
  bool adaptive = false;
  float temperature = 0.8f;
  SamplingFlags sampling;
  std::vector<std::string> stop;
  std::size_t threads = 0;
  bool baseline = false;
  bool json = false;
  std::optional<std::string> trace;
};

void run_generate(const GenerateOptions& o) {
  if (!o.prompt && !o.prompt_file)
    throw Error("generate: give the prompt with --prompt TEXT or --prompt-file FILE");
  DecodeSetup setup;
  setup.k = o.k;
  setup.adaptive = o.adaptive;
  if (o.baseline)
    setup.drafter = DecodeSetup::Drafter::none;
  else if (o.draft)
    setup.drafter = DecodeSetup::Drafter::model;
  else if (o.ngram) {
    setup.drafter = DecodeSetup::Drafter::ngram;
    setup.ngram = *o.ngram;
  } else {
    throw Error(
        "generate: give --draft MODEL or --ngram N for speculative decoding, or --baseline for "
        "target-only "
        "decoding");
  }
  const bool speculative = setup.drafter != DecodeSetup::Drafter::none;

  Model target = load_model_for_cpu(o.target, "target", o.threads);
  std::optional<Model> draft;
  if (setup.drafter == DecodeSetup::Drafter::model) {
    draft = load_model_for_cpu(*o.draft, "draft", o.threads);
    check_same_vocabulary(target, *draft);
  }
  const std::string text = o.prompt ? *o.prompt : read_text_file(*o.prompt_file);
  const std::vector<token_t> prompt = encode_prompt(
      target, text, o.prompt ? std::string("--prompt") : "--prompt-file " + *o.prompt_file);

  GenerationConfig config;
  config.max_new_tokens = o.max_new_tokens;
  config.sampling = o.sampling.params(o.temperature);
  config.seed = o.sampling.seed;
  config.stop_strings = o.stop;
  config.record_rounds = o.trace.has_value() || o.json;

  GenerationResult result;
  if (o.json) {
    result = run_decode(target, draft ? &*draft : nullptr, setup, prompt, config);
  } else {
    StreamPrinter printer(speculative);
    result =
        run_decode(target, draft ? &*draft : nullptr, setup, prompt, config, printer.callbacks());
    printer.finish();
  }

  // What was run, for the JSON output and the trace's header.
  nlohmann::json settings = {{"mode", speculative ? "speculative" : "baseline"},
                             {"decoder", setup.label()},
                             {"target", o.target}};
  if (setup.drafter == DecodeSetup::Drafter::model) settings["draft"] = *o.draft;
  if (setup.drafter == DecodeSetup::Drafter::ngram) settings["ngram"] = setup.ngram;
  if (speculative) settings["k"] = o.adaptive ? nlohmann::json("adaptive") : nlohmann::json(o.k);
  settings["temperature"] = as_typed(o.temperature);
  settings["top_k"] = o.sampling.top_k;
  settings["top_p"] = as_typed(o.sampling.top_p);
  settings["min_p"] = as_typed(o.sampling.min_p);
  settings["seed"] = o.sampling.seed;
  settings["max_new_tokens"] = o.max_new_tokens;

  if (o.trace) {
    TraceInput input;
    input.title = "specdec generate: " + setup.label();
    input.settings = settings;
    input.prompt = prompt;
    input.tokenizer = target.file.tokenizer.get();
    input.result = &result;
    write_trace(*o.trace, input);
  }

  if (o.json) {
    nlohmann::json out = settings;
    out["prompt_tokens"] = prompt;
    out["tokens"] = result.tokens;
    out["text"] = result.text;
    out["stop_reason"] = std::string(to_string(result.stop_reason));
    out["stats"] = stats_json(result.stats);
    if (speculative) {
      nlohmann::json rounds = nlohmann::json::array();
      for (const RoundRecord& r : result.rounds)
        rounds.push_back({{"position", r.position},
                          {"draft_length", r.draft_length},
                          {"drafted", r.drafted},
                          {"accepted", r.accepted},
                          {"rejected", r.rejected},
                          {"next", r.next},
                          {"bonus", r.bonus},
                          {"emitted", r.emitted}});
      out["rounds"] = std::move(rounds);
    }
    print_json(out);
  } else {
    fmt::print(stderr, "[{}] {}\n", setup.label(), stats_line(result, speculative));
    if (o.trace) fmt::print(stderr, "trace written to {}\n", *o.trace);
  }
}

}  // namespace

void add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd =
      app.add_subcommand("generate", "generate a continuation of a prompt, streamed to stdout");
  cmd->add_option("--target", o->target, "target model: a .gguf file or a Hugging Face folder")
      ->required()
      ->check(CLI::ExistingPath);
  auto* draft = cmd->add_option("--draft", o->draft, "draft model (same tokenizer as the target)")
                    ->check(CLI::ExistingPath);
  auto* ngram = cmd->add_option("--ngram", o->ngram,
                                "draft with prompt lookup: the longest recent n-gram match, n <= N")
                    ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  draft->excludes(ngram);
  auto* prompt =
      cmd->add_option("--prompt", o->prompt, "the prompt text (BOS is added as the model expects)");
  auto* prompt_file =
      cmd->add_option("--prompt-file", o->prompt_file, "read the prompt from a file")
          ->check(CLI::ExistingFile);
  prompt->excludes(prompt_file);
  cmd->add_option("-n,--max-tokens", o->max_new_tokens, "tokens to generate at most")
      ->check(kCount)
      ->capture_default_str();
  cmd->add_option("-k", o->k, "tokens drafted per round")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str();
  cmd->add_flag("--adaptive", o->adaptive,
                "choose k each round from the running acceptance (1..8)");
  cmd->add_option("--temp", o->temperature, "temperature (0: greedy)")
      ->check(kTemperature)
      ->capture_default_str();
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("--stop", o->stop, "stop when the text contains this string (repeatable)");
  add_threads_flag(*cmd, o->threads);
  cmd->add_flag("--baseline", o->baseline, "target-only decoding (no draft), for comparison");
  cmd->add_flag("--json", o->json,
                "print one JSON object (tokens, text, stats) instead of streaming");
  cmd->add_option("--trace", o->trace, "write an HTML page showing every round");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace specdec::cli
