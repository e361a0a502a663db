// specdec bench: target-only (baseline) and speculative decoding on the same prompts, in one
// process, and a table of tokens/s, speedup, acceptance and tokens per round.
//
//   specdec bench [-m T] [-md D] [--draft-head 0,32768] [--ngram N] [--lookup-draft]
//                 [--prompts F.jsonl | --prompt-file F] [-k 2,4,8] [--adaptive] [--temp 0,0.8]
//                 [-n 128] [--repeat 3] [--json]
//
// Method. Every repeat runs, for each temperature and each prompt, the baseline and then every
// speculative configuration, one after the other: machine noise then falls on all of them alike.
// A configuration's tokens/s is its tokens over its decode time (prefill excluded) summed over
// the prompts of a domain; its speedup is that over the baseline's tokens/s of the same repeat.
// The table shows medians over the repeats. Prompt i uses seed + i in every configuration and
// repeat, so repeats redo identical work and only the timings vary. At temperature 0 the
// speculative tokens must equal the baseline's: bench checks and reports it.
//
// Costs. Before decoding, bench times the target's forward over 1 .. max k + 1 tokens and a step
// of each draft (cost_model.hpp): printed as the cost table, and the round costs C(k) that
// --adaptive uses (fixed for the run). Each row's round time split (draft forwards, target
// forwards, sampling and verification, the rest) is measured during decoding.
//
// Device models (--backend cuda): the cost table waits for each forward's completion point
// (specdec::synchronize), so T(n) and the draft step are GPU time. During decoding the draft's
// steps are enqueued without a wait and the round waits once, for its outcome: the draft's GPU
// time then falls in the verify columns, which hold draft + verify, and the draft columns stay
// empty (JSON: null).

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench_prompts.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "demo_models.hpp"
#include "options.hpp"
#include "specdec/decoder/cost_model.hpp"

namespace specdec::cli {

namespace {

struct BenchOptions {
  std::optional<std::string> target;
  std::optional<std::string> draft;
  std::optional<std::size_t> ngram;
  std::size_t ngram_min = 1;
  bool lookup_draft = false;
  bool suffix = false;
  bool draft_trees = false;
  std::vector<std::size_t> tree_nodes{16};
  std::vector<std::size_t> tree_topk{ModelTreeOptions{}.branch};      ///< --draft-trees shapes
  std::vector<std::size_t> tree_depth{ModelTreeOptions{}.max_depth};  ///< --draft-trees shapes
  std::vector<float> draft_p_min{ModelTreeOptions{}.min_score};       ///< --draft-trees shapes
  float draft_p_split = ModelTreeOptions{}.split;
  float suffix_min_prob = 0.1f;
  std::vector<std::size_t> draft_heads{0};
  std::optional<std::string> prompts;
  std::optional<std::string> prompt_file;
  std::optional<std::string> models_dir;
  std::vector<std::size_t> ks{4};
  bool adaptive = false;
  std::vector<float> temperatures{0.0f};
  std::size_t max_new_tokens = 128;
  std::size_t repeat = 3;
  std::size_t limit = 0;
  SamplingFlags sampling = [] {
    SamplingFlags f;
    f.seed.text = "0";  // measurements repeat: the same texts in every run
    return f;
  }();
  ModelFlags models;
  BackendFlag backend;
  bool json = false;
};

/// Totals of one configuration over the prompts of one domain, in one repeat.
struct Totals {
  std::size_t prompts = 0;
  std::size_t tokens = 0;
  std::size_t rounds = 0;
  std::size_t target_passes = 0;
  std::size_t draft_passes = 0;
  std::size_t drafted = 0;
  std::size_t accepted = 0;
  double decode_seconds = 0;
  double verify_seconds = 0;    // target forwards of the decode phase
  double draft_seconds = 0;     // draft model forwards of the decode phase
  double sampling_seconds = 0;  // drawing drafted tokens, processing and verifying target rows

  void add(const GenerationStats& s) {
    ++prompts;
    tokens += s.tokens_emitted;
    rounds += s.rounds;
    target_passes += s.target_passes;
    draft_passes += s.draft_passes;
    drafted += s.drafted;
    accepted += s.accepted;
    decode_seconds += s.decode_seconds;
    verify_seconds += s.verify_seconds;
    draft_seconds += s.draft_seconds;
    sampling_seconds += s.sampling_seconds;
  }
  /// Seconds per target forward (the baseline's: one token; speculative: k + 1 tokens).
  [[nodiscard]] double seconds_per_target_pass() const {
    return target_passes ? verify_seconds / static_cast<double>(target_passes) : 0.0;
  }
  [[nodiscard]] double seconds_per_draft_pass() const {
    return draft_passes ? draft_seconds / static_cast<double>(draft_passes) : 0.0;
  }
  [[nodiscard]] double tokens_per_second() const {
    return decode_seconds > 0 ? tokens / decode_seconds : 0.0;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

template <class LM>
void bench_on(const BenchOptions& o, Backend backend, const std::vector<EvalPrompt>& prompts,
              const std::string& prompt_source);

void run_bench(BenchOptions o) {
  // Models and prompts: the bundled demo pair and its eval prompts unless told otherwise.
  std::optional<std::filesystem::path> demo_dir;
  if (!o.target) {
    demo_dir = find_models_dir(o.models_dir);
    o.target = (*demo_dir / kDemoTarget).string();
    if (!o.draft && !o.ngram && !o.suffix) o.draft = (*demo_dir / kDemoDraft).string();
  }
  if (!o.draft && !o.ngram && !o.suffix)
    throw Error("bench: give --draft MODEL, --ngram N and/or --suffix (the drafters to compare)");
  std::vector<EvalPrompt> prompts;
  std::string prompt_source;
  if (o.prompt_file) {
    prompts.push_back({"all", read_text_file(*o.prompt_file)});
    prompt_source = *o.prompt_file;
  } else {
    if (!o.prompts) {
      // eval-prompts.jsonl next to the target (the demo and shared pairs' layout), else the
      // demo folder's for the demo pair, else the built-in general prompts.
      const auto beside = std::filesystem::path(*o.target).parent_path() / kDemoPrompts;
      if (std::filesystem::exists(beside))
        o.prompts = beside.string();
      else if (demo_dir)
        o.prompts = (*demo_dir / kDemoPrompts).string();
    }
    if (o.prompts) {
      prompts = read_eval_prompts(*o.prompts);
      prompt_source = *o.prompts;
    } else {
      for (const BuiltinPrompt& p : kBuiltinBenchPrompts)
        prompts.push_back({std::string(p.domain), std::string(p.text)});
      prompt_source = "built-in";
      note(
          fmt::format("no --prompts: running specdec's {} built-in general prompts (code and "
                      "prose, plain text; docs/cli.md); --prompts FILE.jsonl measures yours",
                      prompts.size()));
    }
  }
  if (o.limit > 0) {  // the first `limit` prompts of each domain
    std::map<std::string, std::size_t> seen;
    std::erase_if(prompts, [&](const EvalPrompt& p) { return ++seen[p.domain] > o.limit; });
  }

  const Backend backend = o.backend.resolve();
  on_backend(backend, [&]<class LM>(std::type_identity<LM>) {
    bench_on<LM>(o, backend, prompts, prompt_source);
  });
}

/// What a bench run measured, before it is reported (results_json, print_table, print_json).
struct Measurement {
  Backend backend = Backend::cpu;
  std::string prompt_source;
  std::size_t prompt_count = 0;
  std::uint64_t seed = 0;
  std::size_t threads = 0;  ///< the target's (0 on a GPU)
  /// Whether a round's draft time can be split from its verify time (host models).
  bool split_draft_time = true;
  ForwardTimes target_times;                 ///< T(1) .. T(max k + 1)
  std::size_t timing_context = 0;            ///< cached positions before each timed forward
  std::size_t max_k = 0;                     ///< the largest k the costs cover
  std::map<std::size_t, double> draft_step;  ///< --draft-head -> seconds of one draft step
  std::vector<DecodeSetup> setups;           ///< the baseline first
  std::vector<std::string> domains;          ///< the prompts' domains (+ "all" when several)
  /// totals[repeat][temperature][setup][domain]
  std::vector<std::vector<std::vector<std::map<std::string, Totals>>>> totals;
  std::size_t greedy_runs = 0, greedy_mismatches = 0;

  /// The round cost C(k), k = 0 .. max_k, with this draft step.
  [[nodiscard]] std::vector<double> costs_of(double draft_seconds) const {
    ForwardTimes t = target_times;
    t.draft = draft_seconds;
    return round_costs(t, max_k);
  }
  /// C at a mean draft length (n-gram rounds draft fewer than k): linear between whole k.
  [[nodiscard]] double cost_at(double draft_seconds, double k) const {
    const std::vector<double> c = costs_of(draft_seconds);
    const double at = std::clamp(k, 0.0, static_cast<double>(max_k));
    const auto lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, max_k);
    return c[lo] + (at - static_cast<double>(lo)) * (c[hi] - c[lo]);
  }
};

/// The measurements, on the backend's model type LM: the models, the cost model (forwards timed
/// before decoding), then every setup on every prompt, temperature and repeat.
template <class LM>
Measurement measure(const BenchOptions& o, Backend backend, const std::vector<EvalPrompt>& prompts,
                    const std::string& prompt_source) {
  Measurement m;
  m.backend = backend;
  m.prompt_source = prompt_source;
  m.prompt_count = prompts.size();
  m.split_draft_time = logits_memory_v<LM> == Memory::host;
  Model<LM> target = open_model<LM>(*o.target, "target");
  std::optional<Model<LM>> draft;
  if (o.draft) draft = open_model<LM>(*o.draft, "draft");
  {
    std::vector<Model<LM>*> models = {&target};
    if (draft) models.push_back(&*draft);
    start_models<LM>(models, o.models);
  }
  if (draft) check_draft_compatible(target.file, draft->file);
  if (o.lookup_draft && !(draft && o.ngram))
    throw Error("bench: --lookup-draft needs --draft MODEL and --ngram N");
  // The draft with its head restricted to the first N ids, per --draft-head N (0: the draft
  // itself): other Transformers over the same weights.
  std::map<std::size_t, Model<LM>> heads;
  if (draft)
    for (const std::size_t n : o.draft_heads) {
      if (n == 0 || heads.contains(n)) continue;
      if (n > draft->file.config.vocab_size)
        throw Error(fmt::format("--draft-head {}: the draft's vocabulary has only {} tokens", n,
                                draft->file.config.vocab_size));
      if constexpr (std::is_same_v<LM, cpu::Transformer>) {
        cpu::Options options = model_options(draft->file, "draft", o.models);
        options.head_tokens = cpu::first_tokens(n);
        Model<LM>& m = heads[n];
        m.file = draft->file;
        m.role = "draft";
        m.lm = std::make_unique<cpu::Transformer>(m.file, options);
      } else {
        throw Error(fmt::format(
            "--draft-head {}: a restricted draft head is a CPU backend option (--backend cpu)", n));
      }
    }
  auto draft_with_head = [&](std::size_t n) -> Model<LM>* {
    if (!draft) return nullptr;
    return n ? &heads.at(n) : &*draft;
  };
  m.threads = model_threads(*target.lm);
  const std::uint64_t seed = m.seed = o.sampling.seed.resolve();
  std::vector<std::vector<token_t>> prompt_ids;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    prompt_ids.push_back(encode_prompt(target, prompts[i].text,
                                       fmt::format("{} (prompt {})", prompt_source, i + 1)));

  // The cost model: T(1) .. T(max k + 1) of the target and a step of each draft, measured now.
  // (the largest k of a run: adaptive k goes up to DecodeSetup::max_k; at most the context allows)
  // (and a suffix tree of N nodes is a forward of N + 1 tokens)
  const std::size_t max_tree = o.suffix || o.draft_trees
                                   ? *std::max_element(o.tree_nodes.begin(), o.tree_nodes.end())
                                   : std::size_t{0};
  const std::size_t max_k = m.max_k =
      std::min(std::max({o.adaptive ? DecodeSetup{}.max_k : std::size_t{1},
                         *std::max_element(o.ks.begin(), o.ks.end()), max_tree}),
               target.lm->context_length() - 1);
  // The forwards are timed after the context a round typically has here, the median over the
  // prompts of their length plus half the tokens generated: attention reads the whole cache once
  // per token of a forward, so a verify costs more after a long prompt (an editing prompt that
  // holds a file) than after a short one.
  std::vector<std::size_t> contexts;
  for (const auto& ids : prompt_ids) contexts.push_back(ids.size() + o.max_new_tokens / 2);
  std::nth_element(contexts.begin(),
                   contexts.begin() + static_cast<std::ptrdiff_t>(contexts.size() / 2),
                   contexts.end());
  const std::size_t context = m.timing_context =
      contexts.empty() ? 128 : contexts[contexts.size() / 2];
  m.target_times = measure_forward_times(*target.lm, static_cast<LM*>(nullptr), max_k, context);
  std::map<std::size_t, double>& draft_step = m.draft_step;
  if (draft)
    for (const std::size_t n : o.draft_heads)
      draft_step[n] =
          measure_forward_times(*target.lm, draft_with_head(n)->lm.get(), 0, context).draft;

  // The configurations: the baseline first, then each drafter with each k and adaptive k.
  std::vector<DecodeSetup>& setups = m.setups;
  setups.resize(1);
  auto add_setups = [&](DecodeSetup s, double draft_seconds) {
    for (const std::size_t k : o.ks) {
      s.k = k;
      setups.push_back(s);
    }
    if (o.adaptive) {
      s.adaptive = true;
      s.max_k = std::min(s.max_k, max_k);  // the costs cover k <= max_k
      s.round_cost = m.costs_of(draft_seconds);
      setups.push_back(s);
    }
  };
  DecodeSetup setup;
  setup.ngram = o.ngram.value_or(3);
  setup.ngram_min = o.ngram_min;
  if (draft)
    for (const std::size_t n : o.draft_heads) {
      setup.drafter = DecodeSetup::Drafter::model;
      setup.draft_head = n;
      add_setups(setup, draft_step.at(n));
    }
  if (o.ngram) {
    setup.drafter = DecodeSetup::Drafter::ngram;
    setup.draft_head = 0;
    add_setups(setup, 0.0);
  }
  if (o.suffix) {
    // Suffix decoding: trees of each --tree-nodes size (0: chains of each k, the best path).
    setup.drafter = DecodeSetup::Drafter::suffix;
    setup.draft_head = 0;
    setup.suffix_shape.min_score = o.suffix_min_prob;
    for (const std::size_t nodes : o.tree_nodes) {
      setup.tree_nodes = nodes;
      setup.round_cost = nodes > 0 ? m.costs_of(0.0) : std::vector<double>{};  // T(n + 1) / T(1)
      if (nodes > 0)
        setups.push_back(setup);
      else
        add_setups(setup, 0.0);
    }
  }
  if (o.draft_trees && draft) {
    // The draft model's trees of each --tree-nodes size (0: the chains above), shape, and with
    // --suffix also behind the suffix drafter.
    std::vector<DecodeSetup::Drafter> kinds{DecodeSetup::Drafter::model_tree};
    if (o.suffix) kinds.push_back(DecodeSetup::Drafter::suffix_model);
    setup.suffix_shape.min_score = o.suffix_min_prob;
    for (const DecodeSetup::Drafter kind : kinds)
      for (const std::size_t n : o.draft_heads)
        for (const std::size_t nodes : o.tree_nodes)
          for (const std::size_t topk : o.tree_topk)
            for (const std::size_t depth : o.tree_depth)
              for (const float p_min : o.draft_p_min) {
                if (nodes == 0) continue;
                setup.model_tree_shape.min_score = p_min;
                setup.model_tree_shape.split = o.draft_p_split;
                setup.drafter = kind;
                setup.draft_head = n;
                setup.tree_nodes = nodes;
                setup.model_tree_shape.branch = setup.model_tree_shape.expand = topk;
                setup.model_tree_shape.max_depth = depth;
                setup.round_cost = m.costs_of(0.0);  // the target's T(n + 1) / T(1)
                setup.draft_step_cost = draft_step.at(n) / m.target_times.target[0];  // D / T(1)
                setups.push_back(setup);
              }
  }
  if (o.lookup_draft && draft) {
    // Lookup needs a suffix of at least 2 tokens here, else the model is hardly ever asked.
    setup.drafter = DecodeSetup::Drafter::lookup_model;
    setup.ngram_min = std::max<std::size_t>(2, o.ngram_min);
    for (const std::size_t n : o.draft_heads) {
      setup.draft_head = n;
      add_setups(setup, draft_step.at(n));
    }
  }
  std::vector<std::string>& domains = m.domains;
  for (const auto& p : prompts)
    if (std::find(domains.begin(), domains.end(), p.domain) == domains.end())
      domains.push_back(p.domain);
  if (domains.size() > 1) domains.push_back("all");

  using PerDomain = std::map<std::string, Totals>;
  auto& totals = m.totals;
  totals.assign(o.repeat, std::vector<std::vector<PerDomain>>(
                              o.temperatures.size(), std::vector<PerDomain>(setups.size())));
  std::size_t& greedy_runs = m.greedy_runs;
  std::size_t& greedy_mismatches = m.greedy_mismatches;

  Progress progress;
  const std::size_t steps = o.repeat * o.temperatures.size() * prompts.size();
  std::size_t step = 0;
  for (std::size_t rep = 0; rep < o.repeat; ++rep)
    for (std::size_t ti = 0; ti < o.temperatures.size(); ++ti)
      for (std::size_t pi = 0; pi < prompts.size(); ++pi) {
        progress.update(
            fmt::format("bench: repeat {}/{}, temperature {}, prompt {}/{} ({:.0f}% done)", rep + 1,
                        o.repeat, o.temperatures[ti], pi + 1, prompts.size(),
                        100.0 * static_cast<double>(step++) / static_cast<double>(steps)));
        GenerationConfig config;
        config.max_new_tokens = o.max_new_tokens;
        config.sampling = o.sampling.params(o.temperatures[ti]);
        config.penalties = o.sampling.penalties();
        config.seed = seed + pi;
        std::vector<token_t> baseline_tokens;
        for (std::size_t si = 0; si < setups.size(); ++si) {
          const GenerationResult r = run_decode<LM>(target, draft_with_head(setups[si].draft_head),
                                                    setups[si], prompt_ids[pi], config);
          if (si == 0) {
            baseline_tokens = r.tokens;
          } else if (config.sampling.greedy() && rep == 0) {
            ++greedy_runs;
            if (r.tokens != baseline_tokens) ++greedy_mismatches;
          }
          totals[rep][ti][si][prompts[pi].domain].add(r.stats);
          if (domains.size() > 1) totals[rep][ti][si]["all"].add(r.stats);
        }
      }
  progress.clear();
  return m;
}

/// One JSON row per (temperature, domain, setup): medians over the repeats, counts from the
/// first repeat (every repeat does the same work).
nlohmann::json results_json(const BenchOptions& o, const Measurement& m) {
  const auto& totals = m.totals;
  const auto& setups = m.setups;
  const bool split_draft_time = m.split_draft_time;

  nlohmann::json results = nlohmann::json::array();
  for (std::size_t ti = 0; ti < o.temperatures.size(); ++ti)
    for (const auto& domain : m.domains)
      for (std::size_t si = 0; si < setups.size(); ++si) {
        // Costs relative to one plain target step of the same repeat: what the speedup is made
        // of (speedup ~ tokens per round / (k x draft cost + verify cost)).
        std::vector<double> tps, speedups, verify_cost, draft_cost, ms_draft, ms_verify,
            ms_sampling, ms_round;
        for (std::size_t rep = 0; rep < o.repeat; ++rep) {
          const Totals& t = totals[rep][ti][si].at(domain);
          const Totals& base = totals[rep][ti][0].at(domain);
          const double step = base.seconds_per_target_pass();
          verify_cost.push_back(step > 0 ? t.seconds_per_target_pass() / step : 0.0);
          draft_cost.push_back(step > 0 ? t.seconds_per_draft_pass() / step : 0.0);
          const double rounds = t.rounds ? static_cast<double>(t.rounds) : 1.0;
          ms_round.push_back(1e3 * t.decode_seconds / rounds);
          ms_draft.push_back(1e3 * t.draft_seconds / rounds);
          ms_verify.push_back(1e3 * t.verify_seconds / rounds);
          ms_sampling.push_back(1e3 * t.sampling_seconds / rounds);
          tps.push_back(t.tokens_per_second());
          speedups.push_back(base.tokens_per_second() > 0
                                 ? t.tokens_per_second() / base.tokens_per_second()
                                 : 0.0);
        }
        const Totals& t = totals[0][ti][si].at(domain);
        const DecodeSetup& s = setups[si];
        // The cost model's speedup: tokens per round over C(mean draft length), the forwards
        // timed before decoding (sampling and bookkeeping left out, on both sides).
        const double draft_seconds =
            s.drafter == DecodeSetup::Drafter::model ? m.draft_step.at(s.draft_head)
            : (s.drafter == DecodeSetup::Drafter::lookup_model || s.uses_model_trees()) && t.rounds
                ? m.draft_step.at(s.draft_head) * static_cast<double>(t.draft_passes) /
                      std::max<double>(1.0, static_cast<double>(t.drafted))
                : 0.0;
        const double mean_k =
            t.rounds ? static_cast<double>(t.drafted) / static_cast<double>(t.rounds) : 0.0;
        const double predicted = t.rounds ? static_cast<double>(t.tokens) /
                                                static_cast<double>(t.rounds) /
                                                m.cost_at(draft_seconds, mean_k)
                                          : 0.0;
        nlohmann::json row = {
            {"temperature", as_typed(o.temperatures[ti])},
            {"domain", domain},
            {"config", s.label()},
            {"drafter", s.drafter == DecodeSetup::Drafter::none           ? "none"
                        : s.drafter == DecodeSetup::Drafter::model        ? "model"
                        : s.drafter == DecodeSetup::Drafter::ngram        ? "ngram"
                        : s.drafter == DecodeSetup::Drafter::suffix       ? "suffix"
                        : s.drafter == DecodeSetup::Drafter::model_tree   ? "model trees"
                        : s.drafter == DecodeSetup::Drafter::suffix_model ? "suffix+model trees"
                                                                          : "ngram+model"},
            {"draft_head", s.draft_head},
            {"k", s.drafter == DecodeSetup::Drafter::none ? nlohmann::json(nullptr)
                  : s.adaptive                            ? nlohmann::json("adaptive")
                                                          : nlohmann::json(s.k)},
            {"prompts", t.prompts},
            {"tokens", t.tokens},
            {"rounds", t.rounds},
            {"target_passes", t.target_passes},
            {"draft_passes", t.draft_passes},
            {"drafted", t.drafted},
            {"accepted", t.accepted},
            {"acceptance_rate",
             t.drafted ? static_cast<double>(t.accepted) / static_cast<double>(t.drafted) : 0.0},
            {"mean_tokens_per_round",
             t.rounds ? static_cast<double>(t.tokens) / static_cast<double>(t.rounds) : 0.0},
            {"tokens_per_second", median(tps)},
            {"speedup", median(speedups)},
            {"predicted_speedup", predicted},
            {"verify_cost", median(verify_cost)},  // target forward / baseline target step
            // draft forward / baseline target step (null: counted in verify, a device model)
            {"draft_cost", split_draft_time ? nlohmann::json(median(draft_cost)) : nullptr},
            // The round's time split, ms per round: draft forwards, target forwards, sampling
            // and verification; the rest of ms_round is bookkeeping (emission, detokenising).
            {"ms_per_round", median(ms_round)},
            {"ms_draft", split_draft_time ? nlohmann::json(median(ms_draft)) : nullptr},
            {"ms_verify", median(ms_verify)},
            {"ms_sampling", median(ms_sampling)},
            {"tokens_per_second_runs", tps},
            {"speedup_runs", speedups}};
        if (s.drafter == DecodeSetup::Drafter::ngram) row["ngram"] = s.ngram;
        if (s.max_tree_nodes() > 0 || s.drafter == DecodeSetup::Drafter::suffix) {
          row["tree_nodes"] = s.tree_nodes;
          if (s.tree_nodes > 0) row["k"] = nullptr;  // a tree round drafts up to tree_nodes
        }
        if (s.uses_model_trees()) {
          row["tree_topk"] = s.model_tree_shape.branch;
          row["tree_depth"] = s.model_tree_shape.max_depth;
          row["draft_p_min"] = s.model_tree_shape.min_score;
          row["draft_p_split"] = s.model_tree_shape.split;
        }
        results.push_back(std::move(row));
      }

  return results;
}

/// The run as one JSON document (--json).
void print_json_report(const BenchOptions& o, const Measurement& m, const nlohmann::json& results) {
  nlohmann::json out = {
      {"command", command_line()},
      {"machine", {{"cpu", cpu_name()}, {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)}}},
      {"target", *o.target},
      {"draft", o.draft ? nlohmann::json(*o.draft) : nlohmann::json(nullptr)},
      {"prompts", m.prompt_source},
      {"max_new_tokens", o.max_new_tokens},
      {"repeat", o.repeat},
      {"seed", m.seed},
      {"backend", backend_name(m.backend)},
      {"threads", m.threads},
      {"target_forward_seconds", m.target_times.target},  // T(1) .. T(max k + 1)
      {"draft_step_seconds", m.draft_step},               // per --draft-head (0: whole head)
      {"timing_context", m.timing_context},  // the cache positions before each timed forward
      {"greedy_runs_compared", m.greedy_runs},
      {"greedy_runs_identical", m.greedy_runs - m.greedy_mismatches},
      {"results", results}};
  print_json(out);
}

/// The run as tables, one per temperature and domain.
void print_table(const BenchOptions& o, const Measurement& m, const nlohmann::json& results) {
  fmt::print(
      "target {}{}\nprompts {} ({} prompts), {} new tokens each, {} repeat(s), {}, medians\n",
      *o.target, o.draft ? "\ndraft  " + *o.draft : std::string(), m.prompt_source, m.prompt_count,
      o.max_new_tokens, o.repeat,
      m.backend == Backend::cuda ? std::string("CUDA backend")
                                 : fmt::format("{} thread(s)", m.threads));
  fmt::print("\ncosts measured before decoding (median of 7): target T(1) = {:.2f} ms; T(n)/T(1):",
             1e3 * m.target_times.target[0]);
  for (std::size_t n = 2; n <= m.target_times.target.size(); ++n)
    fmt::print(" {}:{:.2f}", n, m.target_times.target[n - 1] / m.target_times.target[0]);
  fmt::print("\n");
  for (const auto& [n, d] : m.draft_step)
    fmt::print("draft step{}: {:.2f} ms = {:.3f} T(1)\n",
               n ? fmt::format(" (head {})", n) : std::string(), 1e3 * d,
               d / m.target_times.target[0]);
  std::string last_group;
  for (const auto& r : results) {
    const std::string group =
        fmt::format("temperature {} | {} ({} prompts)", r["temperature"].get<double>(),
                    r["domain"].get<std::string>(), r["prompts"].get<std::size_t>());
    if (group != last_group) {
      fmt::print("\n{}\n  {:<44} {:>7} {:>8} {:>10} {:>11} {:>12} {:>8} {:>8} {:>28}\n", group,
                 "config", "tok/s", "speedup", "predicted", "acceptance", "tokens/round", "verify",
                 "draft", "ms/round: draft verify samp");
      last_group = group;
    }
    const bool base = r["drafter"] == "none";
    const bool model =
        m.split_draft_time && (r["drafter"] == "model" || r["drafter"] == "ngram+model");
    fmt::print(
        "  {:<44} {:>7.1f} {:>7.2f}x {:>9.2f}x {:>11} {:>12.2f} {:>8.2f} {:>8} {:>8.1f} {:>6} "
        "{:>5.1f} {:>6.1f}\n",
        r["config"].get<std::string>(), r["tokens_per_second"].get<double>(),
        r["speedup"].get<double>(), r["predicted_speedup"].get<double>(),
        base ? std::string("-") : fmt::format("{:.3f}", r["acceptance_rate"].get<double>()),
        r["mean_tokens_per_round"].get<double>(), r["verify_cost"].get<double>(),
        model ? fmt::format("{:.2f}", r["draft_cost"].get<double>()) : std::string("-"),
        r["ms_per_round"].get<double>(),
        m.split_draft_time ? fmt::format("{:.1f}", r["ms_draft"].get<double>()) : std::string("-"),
        r["ms_verify"].get<double>(), r["ms_sampling"].get<double>());
  }
  fmt::print(
      "\nverify: one target forward (k + 1 tokens) / one target-only step; draft: one draft "
      "forward / one target-only step; predicted: tokens per round / C(mean k) from the costs "
      "above; ms/round: the round's time, then its draft forwards, target forwards and "
      "sampling + verification.\n");
  if (!m.split_draft_time)
    fmt::print(
        "{}: the draft's steps run asynchronously on the device and each round waits once, so "
        "the verify columns hold draft + verify and the draft columns are empty; the costs "
        "above are GPU time (each forward timed to its completion).\n",
        backend_name(m.backend));
  if (m.greedy_runs > 0)
    fmt::print(
        "\ngreedy (temperature 0): {}/{} speculative runs emitted exactly the baseline's "
        "tokens\n",
        m.greedy_runs - m.greedy_mismatches, m.greedy_runs);
}

/// bench on the backend's model type LM: measure, then report.
template <class LM>
void bench_on(const BenchOptions& o, Backend backend, const std::vector<EvalPrompt>& prompts,
              const std::string& prompt_source) {
  const Measurement m = measure<LM>(o, backend, prompts, prompt_source);
  const nlohmann::json results = results_json(o, m);
  if (o.json)
    print_json_report(o, m, results);
  else
    print_table(o, m, results);
  if (m.greedy_mismatches > 0)
    throw Error(fmt::format("bench: {} of {} greedy speculative runs differ from the baseline",
                            m.greedy_mismatches, m.greedy_runs));
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench",
                                     "baseline vs speculative decoding on the same prompts, one "
                                     "process: tokens/s, speedup, acceptance");
  cmd->add_option("-m,--model,--target", o->target, "target model (default: the bundled demo pair)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--model-draft,--draft,--spec-draft-model", o->draft, "draft model (-md)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--ngram", o->ngram, "also benchmark the n-gram (prompt lookup) drafter, n <= N")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}));
  cmd->add_option("--ngram-min", o->ngram_min, "shortest suffix the n-gram lookup matches")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  cmd->add_flag("--lookup-draft", o->lookup_draft,
                "also benchmark n-gram lookup with the draft model when it finds nothing (needs "
                "--ngram and --draft; suffixes of at least 2 tokens)");
  cmd->add_flag("--suffix", o->suffix,
                "also benchmark suffix decoding (trees of --tree-nodes; no draft model)");
  cmd->add_flag("--draft-trees", o->draft_trees,
                "also benchmark the draft model's token trees of each --tree-nodes size");
  cmd->add_option("--tree-nodes", o->tree_nodes,
                  "--suffix, --draft-trees: tree sizes to run, e.g. 0,8,16 (0: chains of each "
                  "-k)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::Range(std::size_t{0}, std::size_t{255}))
      ->capture_default_str();
  cmd->add_option("--tree-topk", o->tree_topk,
                  "--draft-trees: children per expanded node and nodes expanded per level, "
                  "e.g. 1,2 (each with each --tree-depth; drawn from the draft at --temp > 0)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::Range(std::size_t{1}, std::size_t{16}))
      ->capture_default_str();
  cmd->add_option("--tree-depth", o->tree_depth, "--draft-trees: levels of the tree, e.g. 4,6")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  cmd->add_option("--draft-p-min", o->draft_p_min,
                  "--draft-trees: expand only nodes of at least this path probability under the "
                  "draft, e.g. 0.01,0.3")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--draft-p-split", o->draft_p_split,
                  "--draft-trees: a node's c-th child (c > 1) only where the draft's c-th most "
                  "likely token has this probability or more")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--suffix-min-prob", o->suffix_min_prob,
                  "--suffix: leave out tree nodes of lower estimated probability")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--draft-head", o->draft_heads,
                  "draft output heads to run, e.g. 0,32768: the head restricted to the first N "
                  "token ids (the others get probability 0; still exact), 0 = the whole head")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->capture_default_str();
  auto* prompts =
      cmd->add_option(
             "--prompts", o->prompts,
             "JSON lines {\"domain\": ..., \"text\": ...} (default: eval-prompts.jsonl beside "
             "the target, else the demo models')")
          ->check(CLI::ExistingFile);
  auto* prompt_file =
      cmd->add_option("--prompt-file", o->prompt_file, "one prompt, from a text file")
          ->check(CLI::ExistingFile);
  prompts->excludes(prompt_file);
  cmd->add_option("--models-dir", o->models_dir,
                  "where the demo models are (default: found automatically)");
  cmd->add_option("-k,--draft-max", o->ks, "draft lengths to run, e.g. 2,4,8")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(CLI::Range(std::size_t{1}, std::size_t{256}))
      ->capture_default_str();
  cmd->add_flag("--adaptive", o->adaptive, "also run adaptive k");
  cmd->add_option("--temp,--temperature", o->temperatures, "temperatures to run, e.g. 0,0.8")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(kTemperature)
      ->capture_default_str();
  cmd->add_option("-n,--n-predict,--max-tokens", o->max_new_tokens, "tokens generated per prompt")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--repeat", o->repeat, "repeats (the table shows medians)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}))
      ->capture_default_str();
  cmd->add_option("--limit", o->limit, "use only the first N prompts of each domain (0: all)")
      ->check(kCount)
      ->capture_default_str();
  add_sampling_flags(*cmd, o->sampling);
  add_model_flags(*cmd, o->models, true);
  add_backend_flag(*cmd, o->backend);
  cmd->add_flag("--json", o->json,
                "print the results as one JSON object (input of tools/plot_bench.py)");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace specdec::cli
