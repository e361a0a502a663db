#include "args.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "options.hpp"

namespace specdec::cli {

namespace {

/// llama.cpp's single-dash names of several letters that specdec has, and the name CLI11 knows
/// them by. (One-letter ones, -m -p -f -n -t -c -s -k -r -e, are declared directly.)
struct Alias {
  std::string_view llama;
  std::string_view ours;
};
constexpr Alias kAliases[] = {
    {"-md", "--model-draft"},    {"-cd", "--ctx-size-draft"}, {"-td", "--threads-draft"},
    {"-ctk", "--cache-type-k"},  {"-ctv", "--cache-type-v"},  {"-co", "--color"},
    {"-sys", "--system-prompt"}, {"-np", "--parallel"},
};

/// llama.cpp flags that specdec does not have: all their names, the long one first, and why.
struct Unsupported {
  std::vector<std::string_view> names;
  std::string_view why;
};
const std::vector<Unsupported>& unsupported_flags() {
  static const std::vector<Unsupported> table = {
      {{"--n-gpu-layers", "-ngl", "--gpu-layers", "--n-gpu-layers-draft", "-ngld",
        "--gpu-layers-draft", "--spec-draft-ngl", "--device", "-dev", "--split-mode", "-sm",
        "--tensor-split", "-ts", "--main-gpu", "-mg", "--override-tensor", "-ot", "--no-kv-offload",
        "-nkvo"},
       "specdec runs whole models on one backend: --backend cuda puts target and draft, every "
       "layer, on the GPU, --backend cpu on the CPU"},
      {{"--flash-attn", "-fa"}, "specdec's CPU attention has no alternative kernel to switch to"},
      {{"--batch-size", "-b"}, "the prompt is evaluated in steps of 256 tokens, not configurable"},
      {{"--ubatch-size", "-ub"},
       "the prompt is evaluated in steps of 256 tokens, not configurable"},
      {{"--threads-batch", "-tb"}, "one thread count per model serves prompt and generation (-t)"},
      {{"--mlock", "--no-mmap", "--mmap"}, "specdec always reads the model files memory-mapped"},
      {{"--parallel", "-np", "--cont-batching", "-cb"},
       "this command decodes one sequence at a time (specdec serve --parallel N serves several, "
       "batched)"},
      {{"--conversation", "-cnv", "--no-conversation", "-no-cnv", "--interactive", "-i",
        "--interactive-first", "-if", "--single-turn", "-st", "--multiline-input", "-mli",
        "--in-prefix", "--in-suffix", "--in-prefix-bos"},
       "specdec chat is the conversation mode (generate --chat answers one message); a line "
       "ending with \\ continues a message"},
      {{"--jinja", "--no-jinja", "--chat-template-file", "--chat-template-kwargs"},
       "specdec has no Jinja engine: it renders the chat template families it knows "
       "(--chat-template NAME, docs/cli.md)"},
      {{"--system-prompt-file", "-sysf"}, "give the system message with --system TEXT"},
      {{"--repeat-penalty",
        "--repeat-last-n",
        "--presence-penalty",
        "--frequency-penalty",
        "--mirostat",
        "--mirostat-lr",
        "--mirostat-ent",
        "--typical",
        "--top-nsigma",
        "--xtc-probability",
        "--xtc-threshold",
        "--dry-multiplier",
        "--dry-base",
        "--dry-allowed-length",
        "--dry-penalty-last-n",
        "--dry-sequence-breaker",
        "--dynatemp-range",
        "--dynatemp-exp",
        "--samplers",
        "--sampler-seq",
        "--sampling-seq",
        "--logit-bias",
        "-l",
        "--grammar",
        "--grammar-file",
        "--json-schema",
        "-j"},
       "specdec samples with --temp, --top-k, --top-p and --min-p only, applied alike to target "
       "and draft (which keeps speculative decoding exact)"},
      {{"--draft-p-min", "--spec-draft-p-min", "--draft-p-split", "--spec-draft-p-split",
        "--spec-type"},
       "specdec drafts k tokens per round, fixed (-k / --draft-max) or adaptive (--adaptive); "
       "--draft MODEL or --ngram N choose the drafter"},
      {{"--cache-type-k-draft", "-ctkd", "--cache-type-v-draft", "-ctvd"},
       "--cache-type-k and --cache-type-v set the KV cache type of both models"},
      {{"--hf-repo", "-hf", "-hfr", "--hf-file", "-hff", "--hf-repo-draft", "-hfd", "-hfrd",
        "--model-url", "-mu", "--hf-token", "-hft"},
       "specdec does not download models: give a local .gguf file or Hugging Face folder"},
      {{"--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled"},
       "specdec does not apply adapters"},
      {{"--cpu-mask", "-C", "--cpu-range", "-Cr", "--cpu-strict", "--numa", "--prio", "--poll"},
       "specdec leaves thread placement to the OS (use taskset to pin)"},
      {{"--keep", "--context-shift", "--no-context-shift", "--prompt-cache", "--prompt-cache-all",
        "--prompt-cache-ro"},
       "generation stops when the context is full (raise -c); there is no context shifting or "
       "prompt cache"},
  };
  return table;
}

const Unsupported* find_unsupported(std::string_view name) {
  for (const Unsupported& u : unsupported_flags())
    if (std::find(u.names.begin(), u.names.end(), name) != u.names.end()) return &u;
  return nullptr;
}

const Alias* find_alias(std::string_view name) {
  for (const Alias& a : kAliases)
    if (a.llama == name) return &a;
  return nullptr;
}

/// "-x" or "--xyz" followed by anything but a number: what CLI11 treats as a flag. "-" alone
/// (stdin for -f) and negative numbers ("-1") are values.
bool looks_like_flag(const std::string& s) {
  return s.size() >= 2 && s[0] == '-' && !parse_number(s).has_value();
}

std::string without_dashes(std::string_view s) {
  while (!s.empty() && s.front() == '-') s.remove_prefix(1);
  return std::string(s);
}

/// Every name `cmd` knows, with its dashes ("-m", "--model", ...), and llama.cpp's
/// single-dash aliases of them.
std::vector<std::string> known_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  }
  for (const Alias& a : kAliases)
    if (cmd.get_option_no_throw(std::string(a.ours)) != nullptr) names.emplace_back(a.llama);
  return names;
}

/// The known name nearest to `typed`, when one is near enough to be a likely typo: an edit
/// distance of at most a third of its length (at least 1), or one name a prefix of the other
/// (--temperature for --temp, --ctx for --ctx-size).
std::optional<std::string> nearest(const std::string& typed, std::span<const std::string> names) {
  const std::string t = without_dashes(typed);
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& name : names) {
    const std::string n = without_dashes(name);
    const std::size_t shorter = std::min(t.size(), n.size());
    const bool prefix = shorter >= 3 && (t.rfind(n, 0) == 0 || n.rfind(t, 0) == 0);
    const std::size_t d = edit_distance(t, n);
    if (!prefix && d > std::max<std::size_t>(1, n.size() / 3)) continue;
    const std::size_t score = prefix ? std::min<std::size_t>(d, 1) : d;
    if (!best || score < best_distance) {
      best = name;
      best_distance = score;
    }
  }
  return best;
}

[[noreturn]] void unknown_flag(const std::string& typed, const CLI::App& cmd) {
  const std::vector<std::string> names = known_names(cmd);
  const auto near = nearest(typed, names);
  throw UsageError(fmt::format("{}: unknown flag {}{} (see specdec {} --help)", cmd.get_name(),
                               typed, near ? "; did you mean " + *near + "?" : std::string(),
                               cmd.get_name()));
}

[[noreturn]] void unsupported_flag(const std::string& typed, const Unsupported& u) {
  const std::string_view long_name = u.names.front();
  throw UsageError(fmt::format("{} ({}) is not supported: {}", typed,
                               typed == long_name ? std::string("a llama.cpp flag")
                                                  : fmt::format("llama.cpp's {}", long_name),
                               u.why));
}

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];  // row[i-1][j-1]
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> normalize_args(CLI::App& app, std::vector<std::string> args) {
  std::vector<std::string> subcommands;
  for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; }))
    subcommands.push_back(s->get_name());
  const std::string listed = fmt::format("{}", fmt::join(subcommands, ", "));
  // Up to the subcommand only --help and --version may come (llama.cpp users tend to start with
  // the model: "specdec -m x.gguf ...").
  std::size_t i = 0;
  for (; i < args.size() && looks_like_flag(args[i]); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help" || a == "--version") continue;
    throw UsageError(fmt::format(
        "{} before the subcommand: flags follow it, e.g. specdec generate {} ... (subcommands: {})",
        a, a, listed));
  }
  if (i == args.size()) return args;  // no subcommand: CLI11 says it is required
  const auto found = app.get_subcommands([&](CLI::App* s) { return s->get_name() == args[i]; });
  if (found.empty()) {
    const auto near = nearest(args[i], subcommands);
    throw UsageError(fmt::format("unknown subcommand {}{} (subcommands: {})", args[i],
                                 near ? "; did you mean " + *near + "?" : std::string(), listed));
  }
  const CLI::App& cmd = *found.front();

  for (std::size_t j = i + 1; j < args.size(); ++j) {
    std::string& a = args[j];
    if (a == "--") break;  // the rest are positional arguments
    if (!looks_like_flag(a)) continue;
    const std::string typed = a;
    std::string name = a;
    bool has_value = false;  // --name=value
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        has_value = true;
      }
    } else if (a.size() > 2) {
      // A single dash and several letters: a llama.cpp name, or a one-letter option with its
      // number glued on ("-n64", "-c2048", "-s-1").
      if (const Alias* alias = find_alias(a)) {
        name = a = std::string(alias->ours);
      } else if (const Unsupported* u = find_unsupported(a)) {
        unsupported_flag(typed, *u);
      } else {
        const CLI::Option* o = cmd.get_option_no_throw(a.substr(0, 2));
        if (o != nullptr && o->get_items_expected_max() > 0 && parse_number(a.substr(2))) continue;
        unknown_flag(typed, cmd);
      }
    }
    const CLI::Option* o = cmd.get_option_no_throw(name);
    if (o == nullptr) o = app.get_option_no_throw(name);  // --help, --version
    if (o == nullptr) {
      if (const Unsupported* u = find_unsupported(name)) unsupported_flag(typed, *u);
      unknown_flag(typed, cmd);
    }
    if (has_value) continue;
    // The value(s) CLI11 will take: a required one whatever it looks like (-p -ngl is a
    // prompt), an optional one (--color [on|off|auto]) when it does not look like a flag.
    if (o->get_items_expected_min() > 0)
      ++j;
    else if (o->get_items_expected_max() > 0 && j + 1 < args.size() &&
             !looks_like_flag(args[j + 1]))
      ++j;
  }
  return args;
}

}  // namespace specdec::cli
