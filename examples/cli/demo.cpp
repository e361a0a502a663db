// specdec demo: the main job, no arguments needed. Loads the bundled demo pair (models/), streams
// a code prompt and a prose prompt with speculative decoding — tokens the target accepted from
// the draft in green on a terminal — then measures target-only and speculative decoding on the
// same prompts, in this process, and prints the speedup table.
//
// The text is sampled (temperature 0.8); the table also has greedy runs (temperature 0), where
// the demo checks the guarantee it can show directly: the speculative tokens are exactly the
// target-only tokens.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "demo_models.hpp"
#include "options.hpp"

namespace specdec::cli {

namespace {

struct DemoPrompt {
  const char* domain;
  const char* text;
};

// The pair was trained on the Python standard library and the King James Bible (models/README.md);
// these prompts are from the training domains, so the continuations are in the models' comfort
// zone.
constexpr DemoPrompt kPrompts[] = {
    {"code", "def copy(x):\n    \"\"\"Shallow copy operation on arbitrary Python objects.\"\"\"\n"},
    {"prose", "1 In the beginning God created the heaven and the earth.\n2 And the earth was"},
};

struct DemoOptions {
  std::optional<std::string> models_dir;
  std::size_t max_new_tokens = 128;
  std::optional<std::size_t> k;  ///< fixed draft length; default: adaptive k
  float temperature = 0.8f;
  SeedFlag seed{"0"};  // the demo shows the same text every run
  std::size_t repeat = 3;
  ModelFlags models = one_thread();
  BackendFlag backend;

  // One thread: the demo models are so small (a target step is well under a millisecond) that
  // splitting a forward over threads costs more than it saves (docs/benchmarks.md).
  static ModelFlags one_thread() {
    ModelFlags f;
    f.threads = 1;
    return f;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// One row of the speedup table: a prompt at a temperature, medians over the repeats.
struct DemoRow {
  std::string domain;
  float temperature = 0;
  std::size_t tokens = 0;
  double baseline_tps = 0, spec_tps = 0, speedup = 0, acceptance = 0, tokens_per_round = 0;
  bool identical = true;  ///< speculative tokens == target-only tokens in every repeat
};

/// The demo's decoding settings: the draft model with adaptive k (on this pair the fastest
/// setting, docs/benchmarks.md) unless -k fixes it, and the target alone as the baseline.
struct DemoSetups {
  DecodeSetup speculative;
  DecodeSetup baseline;
  std::uint64_t seed = 0;

  [[nodiscard]] GenerationConfig config(const DemoOptions& o, float temperature) const {
    GenerationConfig config;
    config.max_new_tokens = o.max_new_tokens;
    config.sampling.temperature = temperature;
    config.seed = seed;
    return config;
  }
};

DemoSetups demo_setups(const DemoOptions& o) {
  DemoSetups s;
  s.speculative.drafter = DecodeSetup::Drafter::model;
  s.speculative.k = o.k.value_or(4);
  s.speculative.adaptive = !o.k.has_value();
  s.seed = o.seed.resolve();
  return s;
}

/// Streams each prompt's speculative continuation (accepted draft tokens in green); returns the
/// prompts' tokens.
template <class LM>
std::vector<std::vector<token_t>> stream_prompts(const DemoOptions& o,
                                                 const std::filesystem::path& dir,
                                                 Model<LM>& target, Model<LM>& draft,
                                                 const DemoSetups& setups) {
  const bool colour = use_colour();
  const auto dim = [&](const std::string& s) { return colour ? "\x1b[2m" + s + "\x1b[0m" : s; };
  fmt::print("specdec demo: speculative decoding with the bundled pair in {}\n", dir.string());
  fmt::print("  target {} ({} layers, dim {}), draft {} ({} layers, dim {}), {}\n", kDemoTarget,
             target.file.config.n_layers, target.file.config.dim, kDemoDraft,
             draft.file.config.n_layers, draft.file.config.dim, setups.speculative.label());
  fmt::print("  sampling at temperature {} (seed {}), {} new tokens per prompt{}\n", o.temperature,
             setups.seed, o.max_new_tokens,
             colour
                 ? "; \x1b[32mgreen\x1b[0m: drafted by the draft model and accepted by the target"
                 : "");
  std::vector<std::vector<token_t>> prompts;
  for (const DemoPrompt& p : kPrompts) {
    prompts.push_back(encode_prompt(target, p.text, "demo prompt"));
    fmt::print("\n--- {} ---\n{}", p.domain, dim(p.text));
    std::fflush(stdout);
    StreamPrinter printer(true);
    (void)run_decode<LM>(target, &draft, setups.speculative, prompts.back(),
                         setups.config(o, o.temperature), printer.callbacks());
    printer.finish();
  }
  return prompts;
}

/// The table's measurements: both prompts, greedy and sampled. Baseline and speculative runs
/// alternate so that machine noise hits both alike; medians of the repeats.
template <class LM>
std::vector<DemoRow> measure_rows(const DemoOptions& o, Model<LM>& target, Model<LM>& draft,
                                  const DemoSetups& setups,
                                  const std::vector<std::vector<token_t>>& prompts) {
  std::vector<DemoRow> rows;
  Progress progress;
  for (const float temperature : {0.0f, o.temperature})
    for (std::size_t pi = 0; pi < prompts.size(); ++pi) {
      DemoRow row{kPrompts[pi].domain, temperature};
      std::vector<double> base_tps, spec_tps, ratios;
      for (std::size_t rep = 0; rep < o.repeat; ++rep) {
        progress.update(fmt::format("measuring {} at temperature {}: run {}/{} ...", row.domain,
                                    temperature, rep + 1, o.repeat));
        const GenerationConfig config = setups.config(o, temperature);
        const GenerationResult b =
            run_decode<LM>(target, nullptr, setups.baseline, prompts[pi], config);
        const GenerationResult s =
            run_decode<LM>(target, &draft, setups.speculative, prompts[pi], config);
        row.identical = row.identical && b.tokens == s.tokens;
        row.tokens = s.tokens.size();
        row.acceptance = s.stats.acceptance_rate;
        row.tokens_per_round = s.stats.mean_tokens_per_round;
        base_tps.push_back(b.stats.tokens_per_second);
        spec_tps.push_back(s.stats.tokens_per_second);
        ratios.push_back(s.stats.tokens_per_second / b.stats.tokens_per_second);
      }
      row.baseline_tps = median(base_tps);
      row.spec_tps = median(spec_tps);
      row.speedup = median(ratios);
      rows.push_back(row);
    }
  progress.clear();
  return rows;
}

void print_table(const DemoOptions& o, const std::filesystem::path& dir,
                 const std::vector<DemoRow>& rows) {
  fmt::print(
      "\nspeculative vs target-only decoding, measured in this run (median of {} runs, prefill "
      "excluded):\n\n",
      o.repeat);
  fmt::print("  {:<7} {:>5} {:>7} {:>15} {:>18} {:>8} {:>11} {:>13} {:>10}\n", "prompt", "temp",
             "tokens", "baseline tok/s", "speculative tok/s", "speedup", "acceptance",
             "tokens/round", "identical");
  for (const DemoRow& r : rows)
    fmt::print("  {:<7} {:>5} {:>7} {:>15.1f} {:>18.1f} {:>7.2f}x {:>11.3f} {:>13.2f} {:>10}\n",
               r.domain, r.temperature, r.tokens, r.baseline_tps, r.spec_tps, r.speedup,
               r.acceptance, r.tokens_per_round,
               r.temperature > 0 ? "-" : (r.identical ? "yes" : "NO"));
  fmt::print(
      "\nidentical: at temperature 0 the speculative tokens equal the target-only tokens. When "
      "sampling, the\n"
      "output has the target's distribution (not the same tokens: the random numbers are used "
      "differently).\n"
      "Next: specdec generate --target {0}/{1} --draft {0}/{2} --prompt 'def ' --trace "
      "trace.html\n",
      dir.string(), kDemoTarget, kDemoDraft);
}

template <class LM>
void demo_on(const DemoOptions& o, const std::filesystem::path& dir) {
  Model<LM> target = open_model<LM>((dir / kDemoTarget).string(), "target");
  Model<LM> draft = open_model<LM>((dir / kDemoDraft).string(), "draft");
  {
    Model<LM>* const models[] = {&target, &draft};
    start_models<LM>(models, o.models);
  }
  check_draft_compatible(target.file, draft.file);
  const DemoSetups setups = demo_setups(o);
  const auto prompts = stream_prompts<LM>(o, dir, target, draft, setups);
  const std::vector<DemoRow> rows = measure_rows<LM>(o, target, draft, setups, prompts);
  print_table(o, dir, rows);
  for (const DemoRow& r : rows)
    if (r.temperature == 0 && !r.identical)
      throw Error("demo: a greedy speculative output differs from the target-only output (a bug)");
}

void run_demo(const DemoOptions& o) {
  const auto dir = find_models_dir(o.models_dir);
  const Backend backend = o.backend.resolve();
  on_backend(backend, [&]<class LM>(std::type_identity<LM>) { demo_on<LM>(o, dir); });
}

}  // namespace

void add_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("demo",
                                     "the bundled demo pair: stream a code and a prose prompt, "
                                     "then the speedup table (no arguments needed)");
  cmd->add_option("--models-dir", o->models_dir,
                  "folder with target-q8_0.gguf and draft-q8_0.gguf (default: found "
                  "next to the executable or in the source tree)");
  cmd->add_option("-n,--n-predict,--max-tokens", o->max_new_tokens, "tokens per prompt")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  cmd->add_option("-k,--draft-max", o->k,
                  "fixed number of tokens drafted per round (default: adaptive k)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}));
  cmd->add_option("--temp,--temperature", o->temperature,
                  "temperature of the streamed text (the table adds 0)")
      ->check(kTemperature)
      ->capture_default_str();
  add_seed_flag(*cmd, o->seed);
  cmd->add_option("--repeat", o->repeat, "timed runs per prompt (medians)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100}))
      ->capture_default_str();
  add_model_flags(*cmd, o->models, true);
  add_backend_flag(*cmd, o->backend);
  cmd->callback([o] { run_demo(*o); });
}

}  // namespace specdec::cli
