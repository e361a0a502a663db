#include "args.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "common.hpp"
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
    {"-sys", "--system-prompt"}, {"-np", "--parallel"},       {"-sp", "--special"},
    {"-to", "--timeout"},        {"-nr", "--no-repack"},
};

// ------------------------------------------------------------------------ llama.cpp flags

/// What a llama.cpp flag that specdec does not declare means here: refused with the reason, or
/// accepted and ignored with a note, because it asks for what specdec does anyway. One row per
/// llama.cpp flag: its names, the long one first (the name a message gives after the one typed).
struct LlamaFlag {
  std::vector<std::string_view> names;
  bool takes_value;
  std::string_view why;  ///< refused: why (empty: ignored everywhere)
  /// ignored: what specdec does instead (empty: refused everywhere)
  std::string_view note = {};
  /// With a note: the commands where it is ignored (empty: all); refused in the others.
  std::vector<std::string_view> ignored_in = {};
  /// Refused flags: the value that switches the feature off in llama.cpp, accepted with a note
  /// (a wrapper script that spells out llama.cpp's defaults runs unchanged).
  std::optional<double> neutral = std::nullopt;
};

constexpr std::string_view kOneBackend =
    "specdec runs whole models on one backend: --backend cuda puts target and draft, every "
    "layer, on the GPU, --backend cpu on the CPU";
constexpr std::string_view kSamplers =
    "specdec samples with --temp, --top-k, --top-p, --min-p, the repetition penalties and "
    "--logit-bias only, applied alike to target and draft (which keeps speculative decoding "
    "exact)";
constexpr std::string_view kConversation =
    "specdec chat is the conversation mode (generate --chat answers one message); a line ending "
    "with \\ continues a message";
constexpr std::string_view kOneAnswer =
    "specdec generate answers once (specdec chat is the conversation mode)";
constexpr std::string_view kPromptSteps =
    "the prompt is evaluated in steps of 256 tokens, not configurable";
constexpr std::string_view kNoDownload =
    "specdec does not download models: give a local .gguf file or Hugging Face folder";
constexpr std::string_view kPlacement =
    "specdec leaves thread placement to the OS (use taskset to pin)";
constexpr std::string_view kNoShift =
    "generation stops when the context is full (raise -c); there is no context shifting or "
    "prompt cache";
constexpr std::string_view kDrafting =
    "specdec drafts k tokens per round, fixed (-k / --draft-max) or adaptive (--adaptive); "
    "--draft MODEL or --ngram N choose the drafter";
constexpr std::string_view kNoJinja =
    "specdec has no Jinja engine: it renders the chat template families it knows "
    "(--chat-template NAME, docs/cli.md)";
constexpr std::string_view kOneSequence =
    "this command decodes one sequence at a time (specdec serve --parallel N serves several, "
    "batched)";
constexpr std::string_view kBothCaches =
    "--cache-type-k and --cache-type-v set the KV cache type of both models";
constexpr std::string_view kNoAdapters = "specdec does not apply adapters";

const std::vector<LlamaFlag>& llama_flags() {
  static const std::vector<LlamaFlag> table = {
      // Placement on devices (-ngl and -ngld: see gpu_layers_flag()).
      {{"--n-gpu-layers", "-ngl", "--gpu-layers"}, true, kOneBackend},
      {{"--n-gpu-layers-draft", "-ngld", "--gpu-layers-draft", "--spec-draft-ngl"},
       true,
       kOneBackend},
      {{"--device", "-dev"}, true, kOneBackend},
      {{"--split-mode", "-sm"}, true, kOneBackend},
      {{"--tensor-split", "-ts"}, true, kOneBackend},
      {{"--main-gpu", "-mg"}, true, kOneBackend},
      {{"--override-tensor", "-ot"}, true, kOneBackend},
      {{"--no-kv-offload", "-nkvo"}, false, kOneBackend},
      // Performance settings with one fixed answer in specdec: the output is the same.
      {{"--flash-attn", "-fa"},
       true,
       {},
       "specdec's attention is one fused kernel; the output is the same either way"},
      {{"--batch-size", "-b"}, true, {}, kPromptSteps},
      {{"--ubatch-size", "-ub"}, true, {}, kPromptSteps},
      {{"--threads-batch", "-tb"},
       true,
       {},
       "one thread count per model (-t) serves prompt and generation"},
      {{"--mmap"}, false, {}, "specdec always reads model files memory-mapped"},
      {{"--no-mmap"},
       false,
       {},
       "specdec always reads model files memory-mapped; the output is the same"},
      {{"--mlock"},
       false,
       "specdec reads the model files memory-mapped and does not lock them in memory"},
      {{"--no-warmup"},
       false,
       {},
       "specdec runs no warm-up pass (the first round's time is in the statistics)"},
      {{"--perf"}, false, {}, "specdec always prints its statistics (stderr, --json)"},
      {{"--no-perf"}, false, {}, "the statistics line is hidden by --log-disable or -lv 2"},
      {{"--cont-batching", "-cb"},
       false,
       kOneSequence,
       "specdec serve batches the rounds of its slots continuously",
       {"serve"}},
      {{"--no-cont-batching", "-nocb"}, false, kOneSequence},
      {{"--parallel", "-np"}, true, kOneSequence},
      // Conversation.
      {{"--conversation", "-cnv"}, false, kConversation},
      {{"--no-conversation", "-no-cnv"},
       false,
       "specdec chat is always a conversation (specdec generate --chat answers one message)",
       kOneAnswer,
       {"generate"}},
      {{"--single-turn", "-st"},
       false,
       "specdec chat goes on until /exit or Ctrl-D (generate --chat answers one message)",
       kOneAnswer,
       {"generate"}},
      {{"--interactive", "-i"}, false, kConversation},
      {{"--interactive-first", "-if"}, false, kConversation},
      {{"--multiline-input", "-mli"}, false, kConversation},
      {{"--in-prefix"}, true, kConversation},
      {{"--in-suffix"}, true, kConversation},
      {{"--in-prefix-bos"}, false, kConversation},
      {{"--jinja"},
       false,
       {},
       "specdec renders the chat template families it knows natively (--chat-template NAME, "
       "docs/cli.md)"},
      {{"--no-jinja"},
       false,
       {},
       "specdec renders the chat template families it knows natively (--chat-template NAME)"},
      {{"--chat-template-file"}, true, kNoJinja},
      {{"--chat-template-kwargs"}, true, kNoJinja},
      {{"--system-prompt-file", "-sysf"}, true, "give the system message with --system TEXT"},
      // Samplers specdec does not have; llama.cpp's "off" values pass.
      {{"--mirostat"}, true, kSamplers, {}, {}, 0.0},
      {{"--mirostat-lr"}, true, kSamplers},
      {{"--mirostat-ent"}, true, kSamplers},
      {{"--typical"}, true, kSamplers, {}, {}, 1.0},
      {{"--top-nsigma"}, true, kSamplers, {}, {}, -1.0},
      {{"--xtc-probability"}, true, kSamplers, {}, {}, 0.0},
      {{"--xtc-threshold"}, true, kSamplers},
      {{"--dry-multiplier"}, true, kSamplers, {}, {}, 0.0},
      {{"--dry-base"}, true, kSamplers},
      {{"--dry-allowed-length"}, true, kSamplers},
      {{"--dry-penalty-last-n"}, true, kSamplers},
      {{"--dry-sequence-breaker"}, true, kSamplers},
      {{"--dynatemp-range"}, true, kSamplers, {}, {}, 0.0},
      {{"--dynatemp-exp"}, true, kSamplers},
      {{"--samplers"}, true, kSamplers},
      {{"--sampling-seq", "--sampler-seq"}, true, kSamplers},
      {{"--grammar"}, true, kSamplers},
      {{"--grammar-file"}, true, kSamplers},
      {{"--json-schema", "-j"}, true, kSamplers},
      {{"--json-schema-file", "-jf"}, true, kSamplers},
      // Drafting.
      {{"--spec-type"}, true, kDrafting},
      {{"--cache-type-k-draft", "-ctkd"}, true, kBothCaches},
      {{"--cache-type-v-draft", "-ctvd"}, true, kBothCaches},
      // Downloads, adapters, placement, context.
      {{"--hf-repo", "-hf", "-hfr"}, true, kNoDownload},
      {{"--hf-file", "-hff"}, true, kNoDownload},
      {{"--hf-repo-draft", "-hfd", "-hfrd"}, true, kNoDownload},
      {{"--model-url", "-mu"}, true, kNoDownload},
      {{"--hf-token", "-hft"}, true, kNoDownload},
      {{"--lora"}, true, kNoAdapters},
      {{"--lora-scaled"}, true, kNoAdapters},
      {{"--control-vector"}, true, kNoAdapters},
      {{"--control-vector-scaled"}, true, kNoAdapters},
      {{"--cpu-mask", "-C"}, true, kPlacement},
      {{"--cpu-range", "-Cr"}, true, kPlacement},
      {{"--cpu-strict"}, true, kPlacement},
      {{"--numa"}, true, kPlacement},
      {{"--prio"}, true, kPlacement},
      {{"--poll"}, true, kPlacement},
      {{"--keep"}, true, kNoShift},
      {{"--context-shift"}, false, kNoShift},
      {{"--no-context-shift"},
       false,
       {},
       "specdec never shifts the context: generation stops when it is full"},
      {{"--prompt-cache"}, true, kNoShift},
      {{"--prompt-cache-all"}, false, kNoShift},
      {{"--prompt-cache-ro"}, false, kNoShift},
      {{"--n-prompt", "-p"},
       true,
       "llama-bench's prompt length: specdec bench measures generation over prompts "
       "(--prompts F.jsonl), specdec_bench_cpu prefill (docs/benchmarks.md); in chat, the "
       "system message is --system TEXT"},
      // Logging: the cosmetic ones (the others: find_logging_flag() below).
      {{"--log-colors"}, true, {}, "specdec colours only its streamed text (--color)"},
      {{"--log-prefix"}, false, {}, "specdec's messages start with \"specdec:\""},
      {{"--log-timestamps"}, false, {}, "specdec's messages carry no timestamps"},
      // Server.
      {{"--metrics"},
       false,
       "only specdec serve has metrics",
       "specdec serve always exports /metrics (Prometheus text format)",
       {"serve"}},
      {{"--slots"},
       false,
       "only specdec serve has slots",
       "GET /health reports the slots",
       {"serve"}},
      {{"--ssl-key-file"}, true, "only specdec serve speaks HTTPS"},
      {{"--ssl-cert-file"}, true, "only specdec serve speaks HTTPS"},
  };
  return table;
}

const LlamaFlag* find_llama_flag(std::string_view name) {
  for (const LlamaFlag& f : llama_flags())
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
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

[[noreturn]] void refuse(const std::string& typed, const LlamaFlag& f, std::string_view why) {
  const std::string_view long_name = f.names.front();
  throw UsageError(fmt::format("{} ({}) is not supported: {}", typed,
                               typed == long_name ? std::string("a llama.cpp flag")
                                                  : fmt::format("llama.cpp's {}", long_name),
                               why));
}

/// What normalize_args() learnt from the flags it took out of the command line.
struct Taken {
  std::vector<std::string> notes;   ///< "-fa on: ignored: ..." (printed once logging is known)
  std::vector<std::string> append;  ///< rewritten flags for CLI11 (-ngl 0 -> --backend cpu)
};

/// llama.cpp's logging flags, the long name first: --verbose (everything), --log-verbosity N
/// (its levels: 1 errors, 2 warnings, 3 information, 4 debug), --log-disable (errors only) and
/// --log-file FILE (stderr goes to FILE). apply_logging_flag() acts on them.
struct LoggingFlag {
  std::vector<std::string_view> names;
  bool takes_value;
};
const LoggingFlag* find_logging_flag(std::string_view name) {
  static const std::vector<LoggingFlag> table = {
      {{"--verbose", "-v", "--log-verbose"}, false},
      {{"--log-verbosity", "-lv", "--verbosity"}, true},
      {{"--log-disable"}, false},
      {{"--log-file"}, true},
  };
  for (const LoggingFlag& f : table)
    if (std::find(f.names.begin(), f.names.end(), name) != f.names.end()) return &f;
  return nullptr;
}
void apply_logging_flag(const LoggingFlag& f, const std::optional<std::string>& value,
                        const std::string& typed) {
  const std::string_view name = f.names.front();
  if (name == "--verbose") {
    set_log_threshold(LogLevel::debug);
  } else if (name == "--log-verbosity") {
    const auto n = value ? parse_number(*value) : std::nullopt;
    if (!n || *n < 0 || std::floor(*n) != *n)
      throw UsageError(
          fmt::format("{}: the verbosity is a whole number >= 0 (1 errors, 2 "
                      "warnings, 3 information, 4 debug), got {}",
                      typed, value.value_or("nothing")));
    set_log_threshold(static_cast<int>(std::min(*n, 100.0)));
  } else if (name == "--log-disable") {
    set_log_threshold(LogLevel::error);
  } else {  // --log-file
    redirect_stderr(*value);
  }
}

/// -ngl / -ngld N: 0 keeps every layer on the CPU (--backend cpu); any other count asks for
/// the GPU, which --backend chooses for whole models. Refused by commands without --backend.
bool is_gpu_layers_flag(const LlamaFlag& row) {
  return row.names.front() == "--n-gpu-layers" || row.names.front() == "--n-gpu-layers-draft";
}
void gpu_layers_flag(const std::string& typed, const LlamaFlag& row, const std::string& value,
                     const CLI::App& cmd, Taken& taken) {
  if (cmd.get_option_no_throw("--backend") == nullptr) refuse(typed, row, row.why);
  const auto n = parse_number(value);
  if (n && *n == 0) {
    taken.append.insert(taken.append.end(), {"--backend", "cpu"});
    taken.notes.push_back(fmt::format("{} 0: the models run on the CPU (--backend cpu)", typed));
  } else {
    taken.notes.push_back(
        fmt::format("{} {}: ignored: {} (cuda is the default when a GPU is "
                    "present)",
                    typed, value, row.why));
  }
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

  std::vector<std::string> out(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  Taken taken;
  for (std::size_t j = i + 1; j < args.size(); ++j) {
    const std::string& a = args[j];
    if (a == "--") {  // the rest are positional arguments
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(j), args.end());
      break;
    }
    out.push_back(a);
    if (!looks_like_flag(a)) continue;
    const std::string typed = a;
    std::string name = a;
    std::optional<std::string> inline_value;  // --name=value
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    }
    if (const Alias* alias = find_alias(name); alias != nullptr && inline_value == std::nullopt) {
      name = out.back() = std::string(alias->ours);
    }
    const CLI::Option* o = cmd.get_option_no_throw(name);
    if (o == nullptr) o = app.get_option_no_throw(name);  // --help, --version
    if (o == nullptr) {
      // Not this command's: one of llama.cpp's flags, taken out here with its value.
      const LlamaFlag* row = find_llama_flag(name);
      const LoggingFlag* logging = find_logging_flag(name);
      if (row != nullptr || logging != nullptr) {
        const bool takes_value = row != nullptr ? row->takes_value : logging->takes_value;
        std::optional<std::string> value = inline_value;
        if (takes_value && !value) {
          if (j + 1 == args.size()) throw UsageError(fmt::format("{} needs a value", typed));
          value = args[++j];
        }
        if (!takes_value && value)
          throw UsageError(fmt::format("{} takes no value, got {}", name, *value));
        out.pop_back();
        if (logging != nullptr) {
          apply_logging_flag(*logging, value, typed);
        } else if (is_gpu_layers_flag(*row)) {
          gpu_layers_flag(typed, *row, *value, cmd, taken);
        } else {
          const std::string shown = typed + (value && !inline_value ? " " + *value : std::string());
          const bool here =
              row->ignored_in.empty() || std::find(row->ignored_in.begin(), row->ignored_in.end(),
                                                   cmd.get_name()) != row->ignored_in.end();
          const auto number = value ? parse_number(*value) : std::nullopt;
          if (!row->note.empty() && here) {
            taken.notes.push_back(fmt::format("{}: ignored: {}", shown, row->note));
          } else if (row->neutral && number && *number == *row->neutral) {
            taken.notes.push_back(fmt::format(
                "{}: ignored: the value that switches the sampler off (specdec has none such)",
                shown));
          } else {
            refuse(typed, *row, row->why);
          }
        }
        continue;
      }
      // A single dash and several letters: a one-letter option with its number glued on
      // ("-n64", "-c2048", "-s-1").
      if (a.rfind("--", 0) != 0 && a.size() > 2) {
        const CLI::Option* one = cmd.get_option_no_throw(a.substr(0, 2));
        if (one != nullptr && one->get_items_expected_max() > 0 && parse_number(a.substr(2)))
          continue;
      }
      unknown_flag(typed, cmd);
    }
    if (inline_value) continue;
    // The value(s) CLI11 will take: a required one whatever it looks like (-p -ngl is a
    // prompt), an optional one (--color [on|off|auto]) when it does not look like a flag.
    if (o->get_items_expected_min() > 0) {
      if (j + 1 < args.size()) out.push_back(args[++j]);
    } else if (o->get_items_expected_max() > 0 && j + 1 < args.size() &&
               !looks_like_flag(args[j + 1])) {
      out.push_back(args[++j]);
    }
  }
  // Before a "--" the rewritten flags would be positional: they go in front of the options.
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(i) + 1, taken.append.begin(),
             taken.append.end());
  for (const std::string& n : taken.notes) note(n);
  return out;
}

}  // namespace specdec::cli
