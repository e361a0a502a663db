#include "options.hpp"

#include <filesystem>
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
            return p && *p > 0 && *p <= 1 ? std::string() : "top-p must be in (0, 1], got " + s;
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

cpu::KvType ModelFlags::kv_type() const {
  if (cache_type_k != cache_type_v)
    throw UsageError(fmt::format(
        "--cache-type-k {} and --cache-type-v {} differ: specdec's KV cache stores keys and "
        "values in one type (give both the same)",
        cache_type_k, cache_type_v));
  return cache_type_k == "f16" ? cpu::KvType::f16 : cpu::KvType::f32;
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
  if (!draft) return;
  cmd.add_option("--threads-draft", f.threads_draft, "CPU threads of the draft (-td; default -t)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1024}));
  cmd.add_option("--ctx-size-draft", f.context_draft,
                 "positions of the draft's KV cache (-cd; default: as -c)")
      ->check(kCount);
}

}  // namespace specdec::cli
