// bench_cuda: CUDA backend decode speed against the GPU's memory roofline, the cost of wider
// steps, prefill, and the device round against the cost model. The CUDA counterpart of bench_cpu.
//
//   bench_cuda MODEL.gguf [MODEL.gguf ...] [--tokens 1,2,4,8,12,16] [--repeats 30] [--context 128]
//              [--round-k 4] [--round-tokens 128] [--draft DRAFT.gguf] [--gemm-rows R]
//              [--json OUT.json]
//
// Every time is GPU time: a forward is timed from an idle device to its completion point
// (specdec::synchronize, cost_model.hpp's measure_forward_times), the median of --repeats.
// For each model it prints:
//   - the device, its peak memory bandwidth (2 x memory clock x bus width) and the bandwidth a
//     device-to-device copy reaches (bytes read + written, the best of 5): the two denominators;
//   - T(n) for each --tokens n after a --context-token prompt, and T(n) / T(1);
//   - the roofline time of one decode step, (weight bytes + KV bytes) / peak, and its fraction of
//     T(1) (also against the copy's bandwidth);
//   - prefill: a forward of 512 tokens on an empty cache (cuBLAS path), tokens/s;
//   - the device round with forced acceptance: the model drafts for itself (a second
//     Transformer over the same weights), greedy, so every drafted token is accepted; the
//     measured ms per round against its forwards, T(2) + (k - 1) T(1) + T(k + 1) (after a full
//     acceptance the draft's first step is fed two tokens), the difference being the round's
//     overhead (sampling kernels, the one copy to the host, launches that the graphs do not
//     hide); the same for plain decoding (AutoregressiveDecoder) against T(1);
//   - token trees: for n = 2, 4, 8, 16 where --tokens has them (and 32, 64 with 16: trees scored
//     in 2 and 4 steps), forward_tree of an n-node binary tree (node i's parent (i - 1) / 2: the
//     widest tree of its depth) against the chain forward of n tokens (one step, the prefill
//     GEMMs beyond 16) and against T(1), interleaved, and accept_path of its deepest path (the
//     K/V rows moved into place);
//   - with --draft D: the same round with D as the draft (its acceptance is whatever the two
//     models' greedy tokens agree on: with random weights, about none) and the draft step D /
//     T(1) against their bytes.
// --gemm-rows R runs the skinny GEMM with R weight rows per lane (1, 2, 4; default 0: its
// automatic choice by the matrix's rows), to compare the choices on one GPU.
// Every speculative run's greedy tokens are compared with plain decoding's: a difference is
// reported and makes the exit status 1 (after the JSON is written).
// Random-weight real-shape models come from make_random_gguf (tools/); the prompt is token ids.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "model_bytes.hpp"
#include "specdec/cuda/transformer.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/cost_model.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/model/loader.hpp"

namespace {

using specdec::token_t;

[[maybe_unused]] void check(cudaError_t e, const char* what) {  // (unused when emulated)
  if (e != cudaSuccess)
    throw specdec::Error(fmt::format("bench_cuda: {}: {}", what, cudaGetErrorString(e)));
}

struct Device {
  std::string name;
  double peak_gbs = 0;  // 2 x memory clock x bus width
  double copy_gbs = 0;  // a device-to-device copy, bytes read + written
};

/// The device's name, its peak memory bandwidth from the attributes, and what a 1 GiB
/// device-to-device copy reaches (best of 5, CUDA events).
Device device_info() {
#if defined(SPECDEC_CUDA_EMULATION)
  return {"emulated device (no timings worth reading)", 0, 0};
#else
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int clock_khz = 0, bus_bits = 0;
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device), "memory clock");
  check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device), "bus width");
  Device d{prop.name, 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9, 0};
  constexpr std::size_t bytes = std::size_t{1} << 30;
  void* a = nullptr;
  void* b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 6; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i > 0) d.copy_gbs = std::max(d.copy_gbs, 2.0 * bytes / (ms * 1e-3) / 1e9);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return d;
#endif
}

std::vector<token_t> prompt_ids(std::size_t n, std::size_t vocab) {
  std::vector<token_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<token_t>((i * 7919 + 13) % vocab);
  return ids;
}

/// Seconds from an idle device to the completion point of what `work` enqueues.
template <class Work>
double time_to_completion(specdec::cuda::Transformer& model, Work&& work) {
  model.synchronize();
  const auto start = std::chrono::steady_clock::now();
  work();
  model.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct TreeTimes {
  double chain = 0, tree = 0, accept = 0;  // seconds: forward(n), forward_tree(n), accept_path
  std::size_t depth = 0;                   // nodes on the accepted (deepest) path
};

/// For each n in `ns`: the median of `repeats` sweeps (two untimed first) of a chain forward of
/// n tokens, forward_tree of the n-node binary tree (node i's parent (i - 1) / 2) and, after
/// another forward_tree, accept_path of its deepest path (the root to node n - 1), each after
/// `context` positions. Leaves the cache empty.
std::vector<TreeTimes> time_trees(specdec::cuda::Transformer& model, std::size_t context,
                                  const std::vector<std::size_t>& ns, std::size_t repeats) {
  model.rollback(0);
  (void)model.forward(std::vector<token_t>(context, token_t{0}));
  // Each size's tree: its parents and the path from the root to its last node.
  std::vector<std::vector<std::int32_t>> parents(ns.size());
  std::vector<std::vector<std::size_t>> paths(ns.size());
  std::vector<TreeTimes> result(ns.size());
  for (std::size_t i = 0; i < ns.size(); ++i) {
    parents[i].assign(ns[i], -1);
    for (std::size_t j = 1; j < ns[i]; ++j) parents[i][j] = static_cast<std::int32_t>((j - 1) / 2);
    for (auto v = static_cast<std::int32_t>(ns[i] - 1); v >= 0;
         v = parents[i][static_cast<std::size_t>(v)])
      paths[i].insert(paths[i].begin(), static_cast<std::size_t>(v));
    result[i].depth = paths[i].size();
  }
  std::vector<std::vector<double>> chain(ns.size()), tree(ns.size()), accept(ns.size());
  for (std::size_t r = 0; r < repeats + 2; ++r) {
    for (std::size_t i = 0; i < ns.size(); ++i) {
      const std::vector<token_t> tokens(ns[i], token_t{0});
      const double c = time_to_completion(model, [&] { (void)model.forward(tokens); });
      model.rollback(context);
      const double t =
          time_to_completion(model, [&] { (void)model.forward_tree(tokens, parents[i]); });
      const double a = time_to_completion(model, [&] { model.accept_path(paths[i]); });
      model.rollback(context);
      if (r < 2) continue;
      chain[i].push_back(c);
      tree[i].push_back(t);
      accept[i].push_back(a);
    }
  }
  const auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (std::size_t i = 0; i < ns.size(); ++i) {
    result[i].chain = median(chain[i]);
    result[i].tree = median(tree[i]);
    result[i].accept = median(accept[i]);
  }
  model.rollback(0);
  return result;
}

struct RoundResult {
  double ms_per_round = 0, tokens_per_round = 0, acceptance = 0, predicted_ms = 0;
  std::vector<token_t> tokens;  // what the decoding emitted (the same in every run: greedy)
};

/// The fastest of 3 greedy runs of `decoder` over `new_tokens` tokens after `prompt` (a first
/// run warms up the graphs and is not counted): its ms per round and its result.
struct TimedRun {
  double ms_per_round = 0;
  specdec::GenerationResult result;
};
template <class Decoder>
TimedRun fastest_greedy_run(Decoder& decoder, const std::vector<token_t>& prompt,
                            std::size_t new_tokens) {
  specdec::GenerationConfig config;
  config.max_new_tokens = new_tokens;
  config.sampling.temperature = 0.0f;  // greedy
  TimedRun best;
  for (int run = 0; run < 4; ++run) {
    specdec::GenerationResult r = decoder.generate(prompt, config);
    if (run == 0 || r.stats.rounds == 0) continue;
    const double ms = 1e3 * r.stats.decode_seconds / static_cast<double>(r.stats.rounds);
    if (best.ms_per_round == 0 || ms < best.ms_per_round) best = {ms, std::move(r)};
  }
  return best;
}

/// Speculative decoding (fixed k) timed by fastest_greedy_run. predicted_ms: the round's forwards
/// from `times`, k D + T(k + 1), where the first draft step costs `first_step` seconds instead of
/// D (after a full acceptance the draft is fed two tokens, x_k and the bonus token: D(2)).
RoundResult time_rounds(specdec::cuda::Transformer& draft, specdec::cuda::Transformer& target,
                        std::size_t k, const std::vector<token_t>& prompt, std::size_t new_tokens,
                        const specdec::ForwardTimes& times, double first_step) {
  specdec::SpeculativeDecoder<specdec::cuda::Transformer, specdec::cuda::Transformer> decoder(
      draft, target, {.k = k});
  TimedRun run = fastest_greedy_run(decoder, prompt, new_tokens);
  const auto& s = run.result.stats;
  const double rounds = std::max(1.0, static_cast<double>(s.rounds));
  return {run.ms_per_round, static_cast<double>(s.tokens_emitted) / rounds,
          s.drafted ? static_cast<double>(s.accepted) / static_cast<double>(s.drafted) : 0.0,
          1e3 * (first_step + static_cast<double>(k - 1) * times.draft + times.target.at(k)),
          std::move(run.result.tokens)};
}

/// "==" or where the two token sequences first differ.
std::string compare_tokens(const std::vector<token_t>& got, const std::vector<token_t>& want) {
  if (got == want) return "==";
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return fmt::format("!= (first difference at token {}: {} against {}; {} and {} tokens)", i,
                     i < got.size() ? std::to_string(got[i]) : "end",
                     i < want.size() ? std::to_string(want[i]) : "end", got.size(), want.size());
}

struct PlainResult {
  double ms_per_token = 0;
  std::vector<token_t> tokens;
};

/// Plain greedy decoding (one token per round) timed by fastest_greedy_run.
PlainResult plain_decoding(specdec::cuda::Transformer& model, const std::vector<token_t>& prompt,
                           std::size_t new_tokens) {
  specdec::AutoregressiveDecoder<specdec::cuda::Transformer> decoder(model);
  TimedRun run = fastest_greedy_run(decoder, prompt, new_tokens);
  return {run.ms_per_round, std::move(run.result.tokens)};
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"CUDA backend benchmark: T(n) against the memory roofline, the device round"};
  std::vector<std::string> models;
  std::vector<std::size_t> ns{1, 2, 4, 8, 12, 16};
  std::size_t repeats = 30, context = 128, round_k = 4, round_tokens = 128, prefill = 512;
  int gemm_rows = 0;
  std::optional<std::string> draft_path, json_path;
  app.add_option("models", models, "GGUF files")->required()->check(CLI::ExistingFile);
  app.add_option("--tokens", ns, "tokens per forward call (at most 16: the decode path)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{16}))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed calls per measurement (median reported)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10000}))
      ->capture_default_str();
  app.add_option("--context", context, "prompt length before the timed calls")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--prefill", prefill, "prompt tokens of the prefill measurement (0: skip)")
      ->capture_default_str();
  app.add_option("--round-k", round_k, "draft length of the timed speculative rounds (0: skip)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{15}))
      ->capture_default_str();
  app.add_option("--round-tokens", round_tokens, "tokens generated by each timed decode")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  app.add_option("--draft", draft_path, "also time rounds with this draft model")
      ->check(CLI::ExistingFile);
  app.add_option("--gemm-rows", gemm_rows,
                 "skinny GEMM weight rows per lane (1, 2, 4; 0: by matrix rows)")
      ->check(CLI::IsMember({0, 1, 2, 4}))
      ->capture_default_str();
  app.add_option("--json", json_path, "also write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  std::sort(ns.begin(), ns.end());
  ns.erase(std::unique(ns.begin(), ns.end()), ns.end());
  if (ns.front() != 1) ns.insert(ns.begin(), 1);
  const std::size_t max_n = std::max(ns.back(), round_k + 1);

  if (specdec::cuda::device_count() == 0)
    throw specdec::Error("bench_cuda: no CUDA device (" + specdec::cuda::device_count_error() +
                         ")");
  const Device device = device_info();
  fmt::print("device: {}, peak memory bandwidth {:.0f} GB/s, device-to-device copy {:.0f} GB/s\n",
             device.name, device.peak_gbs, device.copy_gbs);
  nlohmann::json results = nlohmann::json::array();
  std::size_t greedy_mismatches = 0;  // speculative runs whose greedy tokens differ from plain
  std::optional<specdec::LoadedModel> draft_file;
  if (draft_path) draft_file = specdec::load_model(*draft_path);

  for (const std::string& path : models) {
    const specdec::LoadedModel loaded = specdec::load_model(path);
    const std::size_t context_length = context + round_tokens + 2 * max_n + 16;
    const specdec::cuda::Options options{.context_length = std::max(context_length, prefill),
                                         .gemm_rows_per_lane = gemm_rows};
    specdec::cuda::Transformer model(loaded, options);
    const std::size_t weight_bytes =
        specdec::bench::weight_bytes_per_forward(loaded.config, *loaded.weights);
    const std::size_t kv_bytes = specdec::bench::kv_bytes_per_forward(
        loaded.config, context + 1, specdec::kv_type_bytes(model.options().kv_type));
    const std::string label = loaded.name.empty() ? path : loaded.name;

    // T(1) .. T(max_n) after `context` positions, each to its completion point.
    const specdec::ForwardTimes times =
        specdec::measure_forward_times(model, &model, max_n - 1, context, repeats);
    const double t1 = times.target[0];
    const double roofline = static_cast<double>(weight_bytes + kv_bytes) / (device.peak_gbs * 1e9);
    const double roofline_copy =
        static_cast<double>(weight_bytes + kv_bytes) / (device.copy_gbs * 1e9);
    fmt::print("\n{}: weights read per step {:.1f} MB, KV {:.1f} MB, {} MB on the device\n", label,
               weight_bytes / 1e6, kv_bytes / 1e6, model.device_bytes() / 1000000);
    fmt::print(
        "  T(1) = {:.3f} ms ({:.0f} tok/s); roofline {:.3f} ms = {:.2f} of T(1) at the peak, "
        "{:.2f} "
        "at the copy's bandwidth; achieved {:.0f} GB/s\n",
        1e3 * t1, 1.0 / t1, 1e3 * roofline, roofline / t1, roofline_copy / t1,
        static_cast<double>(weight_bytes + kv_bytes) / t1 / 1e9);
    fmt::print("  T(n)/T(1):");
    nlohmann::json tn = nlohmann::json::object();
    for (const std::size_t n : ns) {
      fmt::print(" {}:{:.3f}", n, times.target[n - 1] / t1);
      tn[std::to_string(n)] = times.target[n - 1];
    }
    fmt::print("\n");
    nlohmann::json row = {{"model", label},
                          {"gemm_rows_per_lane", gemm_rows},
                          {"path", path},
                          {"weight_bytes", weight_bytes},
                          {"kv_bytes", kv_bytes},
                          {"context", context},
                          {"T_seconds", tn},
                          {"roofline_seconds_peak", roofline},
                          {"roofline_fraction_peak", roofline / t1},
                          {"roofline_fraction_copy", roofline_copy / t1}};
    if (prefill > 0) {
      // A forward of `prefill` tokens on the empty cache (measure_forward_times left it so),
      // timed like the cost table's forwards: one warm-up, then the median of 5.
      (void)specdec::detail::time_forward(model, 0, prefill, 1);
      const double ms = 1e3 * specdec::detail::time_forward(model, 0, prefill, 5);
      fmt::print("  prefill {} tokens: {:.2f} ms = {:.0f} tok/s\n", prefill, ms,
                 1e3 * prefill / ms);
      row["prefill_tokens"] = prefill;
      row["prefill_ms"] = ms;
    }
    {
      // Token trees: what scoring n nodes as a tree costs over a chain of n (the tree attention
      // reads each row's path through the staged node table), and what keeping a path costs.
      // (Sizes 2, 4, 8, 16 of --tokens, and 32 and 64 with 16, at most 10 repeats: a tree sweep
      // costs two forwards.)
      std::vector<std::size_t> tree_ns;
      for (const std::size_t n : ns)
        if (n == 2 || n == 4 || n == 8 || n == specdec::cuda::Transformer::tree_step_nodes)
          tree_ns.push_back(n);
      if (std::find(ns.begin(), ns.end(), specdec::cuda::Transformer::tree_step_nodes) != ns.end())
        for (std::size_t n = 2 * specdec::cuda::Transformer::tree_step_nodes;
             n <= specdec::cuda::Transformer::max_tree_nodes; n *= 2)
          tree_ns.push_back(n);
      const std::vector<TreeTimes> trees =
          time_trees(model, context, tree_ns, std::min<std::size_t>(repeats, 10));
      nlohmann::json tree_rows = nlohmann::json::object();
      fmt::print("  trees, forward_tree(n) / forward(n), / T(1) and accept_path of depth d in us:");
      for (std::size_t i = 0; i < tree_ns.size(); ++i) {
        const TreeTimes& t = trees[i];
        fmt::print(" {}:{:.3f}/{:.2f}/{:.0f}us(d{})", tree_ns[i], t.tree / t.chain, t.tree / t1,
                   1e6 * t.accept, t.depth);
        tree_rows[std::to_string(tree_ns[i])] = {{"chain_seconds", t.chain},
                                                 {"tree_seconds", t.tree},
                                                 {"accept_path_seconds", t.accept},
                                                 {"path_nodes", t.depth}};
      }
      fmt::print("\n");
      row["trees"] = tree_rows;
    }
    const std::vector<token_t> prompt = prompt_ids(context, loaded.config.vocab_size);
    const PlainResult plain_result = plain_decoding(model, prompt, round_tokens);
    const double plain = plain_result.ms_per_token;
    fmt::print(
        "  plain greedy decoding: {:.3f} ms/token, T(1) {:.3f} ms: overhead {:.1f} us/token\n",
        plain, 1e3 * t1, 1e3 * (plain - 1e3 * t1));
    row["plain_ms_per_token"] = plain;
    if (round_k > 0) {
      specdec::cuda::Transformer self_draft(loaded, options);
      // Every round is a full acceptance: its first draft step is a forward of 2 tokens, T(2).
      const RoundResult r =
          time_rounds(self_draft, model, round_k, prompt, round_tokens, times, times.target[1]);
      fmt::print(
          "  forced acceptance (the model drafts for itself), k = {}: {:.3f} ms/round, {:.2f} "
          "tokens/round, acceptance {:.3f}; forwards T(2) + (k-1) T(1) + T(k+1) = {:.3f} ms: "
          "overhead {:.1f} us/round\n",
          round_k, r.ms_per_round, r.tokens_per_round, r.acceptance, r.predicted_ms,
          1e3 * (r.ms_per_round - r.predicted_ms));
      const bool same = r.tokens == plain_result.tokens;
      greedy_mismatches += same ? 0 : 1;
      fmt::print("  greedy speculative tokens {} plain decoding's ({} tokens)\n",
                 compare_tokens(r.tokens, plain_result.tokens), plain_result.tokens.size());
      row["forced_round"] = {{"k", round_k},
                             {"greedy_identical", same},
                             {"ms_per_round", r.ms_per_round},
                             {"tokens_per_round", r.tokens_per_round},
                             {"acceptance", r.acceptance},
                             {"predicted_ms", r.predicted_ms},
                             {"speedup_over_plain", r.tokens_per_round / r.ms_per_round * plain}};
      if (draft_file) {
        if (draft_file->config.vocab_size != loaded.config.vocab_size) {
          fmt::print("  --draft: vocabulary {} != {}, skipped\n", draft_file->config.vocab_size,
                     loaded.config.vocab_size);
        } else {
          specdec::cuda::Transformer draft(*draft_file, options);
          specdec::ForwardTimes pair =
              specdec::measure_forward_times(model, &draft, round_k, context, repeats);
          const std::size_t draft_bytes =
              specdec::bench::weight_bytes_per_forward(draft_file->config, *draft_file->weights);
          // (Rounds that end in a full acceptance are rare with an unrelated draft: D for all.)
          const RoundResult d =
              time_rounds(draft, model, round_k, prompt, round_tokens, pair, pair.draft);
          const bool draft_same = d.tokens == plain_result.tokens;
          greedy_mismatches += draft_same ? 0 : 1;
          fmt::print(
              "  draft {}: step {:.3f} ms = {:.3f} T(1) (bytes say {:.3f}); k = {}: {:.3f} "
              "ms/round, acceptance {:.3f}, cost model {:.3f} ms: overhead {:.1f} us/round; greedy "
              "tokens {} plain decoding's\n",
              *draft_path, 1e3 * pair.draft, pair.draft / pair.target[0],
              static_cast<double>(draft_bytes) / static_cast<double>(weight_bytes), round_k,
              d.ms_per_round, d.acceptance, d.predicted_ms, 1e3 * (d.ms_per_round - d.predicted_ms),
              compare_tokens(d.tokens, plain_result.tokens));
          row["draft_round"] = {
              {"draft", *draft_path},
              {"greedy_identical", draft_same},
              {"draft_step_seconds", pair.draft},
              {"draft_step_over_T1", pair.draft / pair.target[0]},
              {"bytes_ratio", static_cast<double>(draft_bytes) / static_cast<double>(weight_bytes)},
              {"ms_per_round", d.ms_per_round},
              {"acceptance", d.acceptance},
              {"predicted_ms", d.predicted_ms}};
        }
      }
    }
    const auto g = model.graph_stats();
    row["graphs"] = {{"captures", g.captures}, {"replays", g.replays}, {"direct", g.direct}};
    results.push_back(std::move(row));
  }
  if (json_path) {
    std::ofstream out(*json_path);
    out << nlohmann::json{{"device", device.name},
                          {"peak_gbs", device.peak_gbs},
                          {"copy_gbs", device.copy_gbs},
                          {"results", results}}
               .dump(2)
        << "\n";
    if (!out) throw specdec::Error("bench_cuda: cannot write " + *json_path);
  }
  if (greedy_mismatches > 0)
    throw specdec::Error(
        fmt::format("{} greedy speculative run(s) emitted other tokens than plain decoding",
                    greedy_mismatches));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda: %s\n", e.what());
  return 1;
}
