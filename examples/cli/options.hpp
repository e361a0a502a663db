#pragma once
// Command-line flags shared by several subcommands, with their validation. Names follow
// llama.cpp where it has the same setting (-m, -md, -t, -c, -s, -n, --temp, ...), with specdec's
// older names kept as aliases (--target, --draft, --seed, --max-tokens); args.hpp handles
// llama.cpp's single-dash multi-letter names (-md, -cd, -ctk, ...), which CLI11 cannot declare.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/cpu/transformer.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec::cli {

/// The number in s, or nullopt when s is not one (validators run before CLI11's conversion).
inline std::optional<double> parse_number(const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

/// A count: a whole number >= 0 (CLI11 would otherwise wrap "-3" around to 2^64 - 3).
inline const CLI::Validator kCount(
    [](std::string& s) -> std::string {
      const auto n = parse_number(s);
      return n && *n >= 0 && std::floor(*n) == *n ? std::string()
                                                  : "must be a whole number >= 0, got " + s;
    },
    "N>=0", "count");

/// -n: a whole number >= 0, or -1 for "until EOS or the context is full" (llama.cpp's meaning).
inline const CLI::Validator kTokenBudget(
    [](std::string& s) -> std::string {
      const auto n = parse_number(s);
      return n && *n >= -1 && std::floor(*n) == *n
                 ? std::string()
                 : "must be -1 (until EOS or the context is full) or a whole number >= 0, got " + s;
    },
    "N>=-1", "token budget");

/// The generation budget for GenerationConfig::max_new_tokens: -1 is "no budget".
inline std::size_t token_budget(std::int64_t n) {
  return n < 0 ? std::numeric_limits<std::size_t>::max() : static_cast<std::size_t>(n);
}

/// A temperature: a finite number >= 0 (0 is greedy).
inline const CLI::Validator kTemperature(
    [](std::string& s) -> std::string {
      const auto t = parse_number(s);
      return t && std::isfinite(*t) && *t >= 0 ? std::string()
                                               : "temperature must be >= 0 (0 is greedy), got " + s;
    },
    "TEMP>=0", "temperature");

// ------------------------------------------------------------------------ sampling

/// -s/--seed: a number in [0, 2^64), or -1 (the default, as in llama.cpp) for a random one,
/// printed on stderr so that the run can be repeated.
struct SeedFlag {
  std::string text = "-1";
  /// The seed to use; draws it for -1, and prints it when `announce` (a sampled run: greedy
  /// decoding draws nothing from it).
  [[nodiscard]] std::uint64_t resolve(bool announce = true) const;
};

/// --top-k, --top-p, --min-p, --sampler-order, --seed and the penalties (--repeat-penalty,
/// --repeat-last-n, --presence-penalty, --frequency-penalty, -l/--logit-bias); the temperature is
/// added by each command: generate takes one, bench a list. The defaults are llama.cpp's: top-k
/// 40, top-p 0.95, min-p 0.05, applied to the logits before the temperature, a random seed, no
/// penalty (window 64).
struct SamplingFlags {
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  std::string order = "llama";  ///< "llama": temperature last; "hf": temperature first
  SeedFlag seed;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::string penalty_scope = "context";        ///< "context" (llama.cpp) or "completion" (OpenAI)
  std::vector<std::string> logit_bias_text;     ///< -l TOKEN(+|-)BIAS, repeatable, as typed
  std::vector<sampling::LogitBias> logit_bias;  ///< parsed from logit_bias_text

  /// The penalties as the flags set them.
  [[nodiscard]] sampling::Penalties penalties() const {
    sampling::Penalties p;
    p.repeat = repeat_penalty;
    p.last_n = repeat_last_n;
    p.presence = presence_penalty;
    p.frequency = frequency_penalty;
    p.logit_bias = logit_bias;
    p.scope = penalty_scope == "completion" ? sampling::PenaltyScope::completion
                                            : sampling::PenaltyScope::context;
    return p;
  }

  [[nodiscard]] sampling::SamplingParams params(float temperature) const {
    sampling::SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.temperature_last = order == "llama";
    return p;
  }
};

void add_seed_flag(CLI::App& cmd, SeedFlag& seed);
/// -l TOKEN_ID(+|-)BIAS (llama.cpp's format; "inf" as the magnitude). Throws
/// CLI::ValidationError naming the value.
sampling::LogitBias parse_logit_bias(const std::string& s);
void add_sampling_flags(CLI::App& cmd, SamplingFlags& f);

// ------------------------------------------------------------------------ decoding

/// How generate, chat and serve decode: the target, the drafter (-md DRAFT, --ngram N, --suffix
/// or --baseline) and the draft length (-k, --draft-min, --adaptive). The commands' option structs
/// derive from it; common.hpp's decode_setup_of() turns it into a DecodeSetup.
struct DecodeFlags {
  std::string target;
  std::optional<std::string> draft;
  std::optional<std::size_t> ngram;
  bool suffix = false;                    ///< --suffix: suffix decoding (SuffixDrafter)
  std::size_t tree_nodes = 16;            ///< --tree-nodes: nodes per suffix tree (0: chains of -k)
  bool tree_nodes_given = false;          ///< --tree-nodes was given: with -md, draft model trees
  std::optional<std::size_t> tree_topk;   ///< --tree-topk: draft model trees' branching
  std::optional<std::size_t> tree_depth;  ///< --tree-depth: draft model trees' levels
  std::optional<float> draft_p_min;       ///< --draft-p-min: draft model trees' expansion cut
  std::optional<float> draft_p_split;     ///< --draft-p-split: draft model trees' branching cut
  float suffix_min_prob = 0.1f;  ///< --suffix-min-prob: a node's least estimated probability
  bool baseline = false;
  std::size_t k = 4;
  bool k_given = false;  ///< -k was given: with --adaptive it is the largest k
  std::size_t draft_min = 0;
  bool adaptive = false;
};

/// The help texts that differ between the commands.
struct DecodeFlagsHelp {
  const char* target;    ///< -m
  const char* baseline;  ///< --baseline
};

/// Adds -m (required), -md, --ngram (exclusive with -md), --baseline, -k, --draft-min and
/// --adaptive.
void add_decode_flags(CLI::App& cmd, DecodeFlags& f, const DecodeFlagsHelp& help);

// ------------------------------------------------------------------------ models

/// The KV cache of a model when -c is not given: the model's context, but at most this many
/// positions (models often claim 32768 to 131072 positions; an f32 cache of 131072 positions of
/// Llama-3.1-8B is 16 GiB).
inline constexpr std::size_t kDefaultContext = 4096;

/// Threads, context and KV cache type of the models a command loads.
struct ModelFlags {
  std::size_t threads = 0;                   ///< -t: 0 = one per physical core
  std::optional<std::size_t> threads_draft;  ///< -td: default -t
  std::optional<std::size_t> context;        ///< -c: 0 = the model's; default kDefaultContext cap
  std::optional<std::size_t> context_draft;  ///< -cd: default -c
  std::string cache_type_k = "f32";          ///< --cache-type-k / -ctk
  std::string cache_type_v = "f32";          ///< --cache-type-v / -ctv
  bool repack = true;                        ///< --repack / --no-repack (-nr)
  [[nodiscard]] KvType kv_type() const;      ///< throws when K and V differ
};

/// Adds -t, -c, --cache-type-k/-v and, with `draft`, -td and -cd.
void add_model_flags(CLI::App& cmd, ModelFlags& f, bool draft);

}  // namespace specdec::cli
