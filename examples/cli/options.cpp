#include "options.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <system_error>

#include <fmt/format.h>

#include "args.hpp"
#include "common.hpp"

namespace specdec::cli {

std::uint64_t SeedFlag::resolve(bool announce) const {
  if (text != "-1") return std::stoull(text);  // the validator accepted it
  std::random_device device;
  const std::uint64_t seed = (std::uint64_t{device()} << 32) | device();
  if (announce &&
      logs(LogLevel::info))  // as llama.cpp prints its sampler seed: the run can be repeated
    fmt::print(stderr, "specdec: random seed {0} (-s {0} repeats this run)\n", seed);
  return seed;
}

void add_seed_flag(CLI::App& cmd, SeedFlag& seed) {
  cmd.add_option("-s,--seed", seed.text,
                 "random seed (Philox): a run is reproducible from it; -1: a random one, printed "
                 "(as llama.cpp)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const bool digits =
                !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == s.npos;
            if (s == "-1" || (digits && (s.size() < 20 || s <= "18446744073709551615"))) return {};
            return "must be -1 (a random seed) or a whole number in [0, 2^64), got " + s;
          },
          "SEED", "seed"))
      ->capture_default_str();
}

void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
  cmd.add_option("--top-k", f.top_k, "keep the k most likely tokens (0: off; llama.cpp's default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--top-p", f.top_p,
                 "nucleus sampling: the smallest set of tokens with this mass, in (0, 1] (1: off)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto p = parse_number(s);
            // Checked as the float the sampler gets: 1e-300 is a positive double but float 0.
            return p && static_cast<float>(*p) > 0 && *p <= 1
                       ? std::string()
                       : "top-p must be in (0, 1] (as a float), got " + s;
          },
          "(0,1]", "top-p"))
      ->capture_default_str();
  cmd.add_option("--min-p", f.min_p,
                 "drop tokens below min-p x the top probability, in [0, 1] (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--sampler-order", f.order,
                 "llama: top-k, top-p and min-p on the logits, then the temperature (llama.cpp's "
                 "chain); hf: the temperature first (Hugging Face transformers, vLLM)")
      ->check(CLI::IsMember({"llama", "hf"}))
      ->capture_default_str();
  add_seed_flag(cmd, f.seed);
  cmd.add_option("--repeat-penalty", f.repeat_penalty,
                 "divide a positive logit (multiply a negative one) of each token in the last "
                 "--repeat-last-n tokens by this; > 0, 1: off")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto v = parse_number(s);
            return v && std::isfinite(*v) && *v > 0 && std::isfinite(1.0f / float(*v))
                       ? std::string()
                       : "the repeat penalty must be finite and > 0 (1: off), got " + s;
          },
          "X>0", "repeat penalty"))
      ->capture_default_str();
  cmd.add_option("--repeat-last-n", f.repeat_last_n,
                 "how many of the last tokens (prompt included) the penalties count; 0: off, "
                 "-1: the whole context")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto v = parse_number(s);
            return v && *v >= -1 && std::floor(*v) == *v && *v <= 1e9
                       ? std::string()
                       : "must be -1 (the whole context) or a whole number >= 0, got " + s;
          },
          "N>=-1", "penalty window"))
      ->capture_default_str();
  const auto finite = [](const char* what) {
    return CLI::Validator(
        [what](std::string& s) -> std::string {
          const auto v = parse_number(s);
          return v && std::isfinite(*v) && std::isfinite(float(*v))
                     ? std::string()
                     : std::string("the ") + what + " must be a finite number, got " + s;
        },
        "X", what);
  };
  cmd.add_option("--presence-penalty", f.presence_penalty,
                 "subtract this from the logit of each token in the window (0: off)")
      ->check(finite("presence penalty"))
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", f.frequency_penalty,
                 "subtract this times its count in the window from each token's logit (0: off)")
      ->check(finite("frequency penalty"))
      ->capture_default_str();
  cmd.add_option("--penalty-scope", f.penalty_scope,
                 "which tokens the penalties count: context (the prompt too, as llama.cpp) or "
                 "completion (only the generated ones, as OpenAI's API and specdec serve)")
      ->check(CLI::IsMember({"context", "completion"}))
      ->capture_default_str();
  cmd.add_option("-l,--logit-bias", f.logit_bias_text,
                 "TOKEN_ID+BIAS or TOKEN_ID-BIAS: add BIAS to that token's logit (repeatable); "
                 "-inf bans it, e.g. -l 15043-inf")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            try {
              (void)parse_logit_bias(s);
              return {};
            } catch (const CLI::ValidationError& e) {
              return e.what();
            }
          },
          "TOKEN_ID(+|-)BIAS", "logit bias"))
      ->each([&f](const std::string& s) { f.logit_bias.push_back(parse_logit_bias(s)); });
}

sampling::LogitBias parse_logit_bias(const std::string& s) {
  // TOKEN_ID, then the sign, then the magnitude (a number, or inf), as llama.cpp's -l.
  const std::size_t sign = s.find_first_of("+-", 1);
  const auto bad = [&s]() {
    return CLI::ValidationError(
        "expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1.5, "
        "15043-inf), got " +
        s);
  };
  if (sign == std::string::npos || sign == 0) throw bad();
  const std::string id = s.substr(0, sign);
  const std::string magnitude = s.substr(sign + 1);
  if (id.find_first_not_of("0123456789") != std::string::npos || id.size() > 9) throw bad();
  float bias = 0;
  if (magnitude == "inf" || magnitude == "infinity") {
    bias = std::numeric_limits<float>::infinity();
  } else {
    const auto v = parse_number(magnitude);
    if (!v || !std::isfinite(*v) || !std::isfinite(float(*v)) || magnitude.find_first_of("+-") == 0)
      throw bad();
    bias = float(*v);
  }
  if (s[sign] == '-') bias = -bias;
  if (bias == std::numeric_limits<float>::infinity())
    throw CLI::ValidationError("a bias of +inf is not a bias (" + s +
                               "): give a finite number, or -inf to ban the token");
  return {static_cast<token_t>(std::stol(id)), bias};
}

namespace {

/// -md MODEL: an existing path. A number where no such file exists is most likely llama.cpp's
/// --draft N (tokens per round), which specdec calls --draft-max.
const CLI::Validator kDraftPath(
    [](std::string& s) -> std::string {
      std::error_code ec;
      if (std::filesystem::exists(s, ec)) return {};
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos)
        return "no such file: " + s +
               " (llama.cpp's --draft N counts drafted tokens; specdec's --draft names the draft "
               "model: use --draft-max " +
               s + ")";
      return "no such file or folder: " + s;
    },
    "MODEL", "draft model");

}  // namespace

void add_decode_flags(CLI::App& cmd, DecodeFlags& f, const DecodeFlagsHelp& help) {
  cmd.add_option("-m,--model,--target", f.target, help.target)
      ->required()
      ->check(CLI::ExistingPath);
  auto* draft = cmd.add_option("--model-draft,--draft,--spec-draft-model", f.draft,
                               "draft model, same tokenizer as the target (-md)")
                    ->check(kDraftPath);
  auto* ngram = cmd.add_option("--ngram", f.ngram,
                               "draft with prompt lookup: the longest recent n-gram match, n <= N")
                    ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  draft->excludes(ngram);
  auto* suffix = cmd.add_flag(
      "--suffix", f.suffix,
      "draft with suffix decoding: the most frequent continuations of the longest suffix seen "
      "before (in the prompt, the output and, in serve, earlier responses), verified as a tree; "
      "with -md, the draft model's tree when the suffix match is weak");
  suffix->excludes(ngram);
  cmd.add_option("--tree-nodes", f.tree_nodes,
                 "tree speculation: nodes of each round's token tree, scored in one target "
                 "forward (at most 255 on the CPU backend, 63 on CUDA). With --suffix (default "
                 "16; on CUDA 15, one forward step; 0: a chain of -k tokens), or with -md: the "
                 "draft model's trees instead of chains (CPU backend)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{255}))
      ->capture_default_str()
      ->each([&f](const std::string&) { f.tree_nodes_given = true; });
  cmd.add_option("--tree-topk", f.tree_topk,
                 "draft model trees (-md --tree-nodes N): children of each expanded node and "
                 "nodes expanded per level (default 2); greedy: the draft's most likely tokens, "
                 "at --temp > 0: drawn from the draft's distribution without replacement")
      ->check(CLI::Range(std::size_t{1}, std::size_t{16}));
  cmd.add_option("--tree-depth", f.tree_depth,
                 "draft model trees (-md --tree-nodes N): levels drafted per round (default 6)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  cmd.add_option("--draft-p-min,--spec-draft-p-min", f.draft_p_min,
                 "draft model trees: expand only nodes whose path probability under the draft "
                 "is at least this (default 0.01)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--draft-p-split,--spec-draft-p-split", f.draft_p_split,
                 "draft model trees: a node's c-th child (c > 1) only where the draft's c-th "
                 "most likely token has at least this probability (default 0; at --temp > 0, "
                 "where children are drawn, still the c-th largest probability, not the drawn "
                 "token's)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--suffix-min-prob", f.suffix_min_prob,
                 "--suffix: leave out nodes whose estimated probability (the product of the "
                 "continuation frequencies along the path) is below this")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd.add_flag("--baseline", f.baseline, help.baseline);
  cmd.add_option("-k,--draft-max,--draft-n,--spec-draft-n-max", f.k,
                 "tokens drafted per round (with --adaptive: the most per round)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str()
      ->each([&f](const std::string&) { f.k_given = true; });
  cmd.add_option("--draft-min,--draft-n-min,--spec-draft-n-min", f.draft_min,
                 "rounds whose proposal has fewer tokens verify none (a plain target step); "
                 "with --adaptive also the least k")
      ->check(kCount)
      ->capture_default_str();
  cmd.add_flag("--adaptive", f.adaptive,
               "choose k each round from the running acceptance (1..8, or up to -k)");
}

namespace {

/// --cache-type-k/-v: what the CPU backend's KV cache can hold, and a clear word for the types
/// llama.cpp has that it cannot.
const CLI::Validator kCacheType(
    [](std::string& s) -> std::string {
      if (s == "f32" || s == "f16") return {};
      if (s == "q8_0" || s == "q4_0" || s == "q4_1" || s == "q5_0" || s == "q5_1" ||
          s == "iq4_nl" || s == "bf16")
        return s +
               " is a llama.cpp KV cache type that specdec's CPU backend does not have (f32 "
               "or f16)";
      return "must be f32 or f16, got " + s;
    },
    "f32|f16", "cache type");

}  // namespace

KvType ModelFlags::kv_type() const {
  if (cache_type_k != cache_type_v)
    throw UsageError(fmt::format(
        "--cache-type-k {} and --cache-type-v {} differ: specdec's KV cache stores keys and "
        "values in one type (give both the same)",
        cache_type_k, cache_type_v));
  return cache_type_k == "f16" ? KvType::f16 : KvType::f32;
}

void add_model_flags(CLI::App& cmd, ModelFlags& f, bool draft) {
  cmd.add_option("-t,--threads", f.threads,
                 draft ? "CPU threads of the target (and of the draft unless -td): 0 = one per "
                         "physical core"
                       : "CPU threads: 0 = one per physical core")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1024}))
      ->capture_default_str();
  cmd.add_option("-c,--ctx-size", f.context,
                 fmt::format("positions of the KV cache{}: 0 = the model's context; default: the "
                             "model's, at most {}",
                             draft ? " (target and draft unless -cd)" : "", kDefaultContext))
      ->check(kCount);
  cmd.add_option("--cache-type-k", f.cache_type_k, "KV cache type of the keys: f32 or f16 (-ctk)")
      ->check(kCacheType)
      ->capture_default_str();
  cmd.add_option("--cache-type-v", f.cache_type_v,
                 "KV cache type of the values: f32 or f16, the same as the keys (-ctv)")
      ->check(kCacheType)
      ->capture_default_str();
  cmd.add_flag("--repack,!--no-repack", f.repack,
               "rewrite the quantised weights at load for the CPU's fastest kernels (AVX512-VNNI: "
               "the same results, faster decoding; --no-repack or -nr keeps the file's layout)")
      ->capture_default_str();
  if (!draft) return;
  cmd.add_option("--threads-draft", f.threads_draft, "CPU threads of the draft (-td; default -t)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1024}));
  cmd.add_option("--ctx-size-draft", f.context_draft,
                 "positions of the draft's KV cache (-cd; default: as -c)")
      ->check(kCount);
}

}  // namespace specdec::cli
