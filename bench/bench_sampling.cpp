// Throughput of the sampling core's verify step against the machine's memory roofline.
//
// BM_read_sum: a plain single-threaded sum over a 512 MiB buffer (far larger than the last-level
// cache): the DRAM read bandwidth one core can reach, the roofline of a memory-bound kernel.
//
// BM_verify_chain: verify_chain_batch (B sequences, one thread) on realistic inputs: rows are
// softmaxes of N(0, 3^2) logits over V tokens, the draft's logits are the target's plus N(0, 1)
// noise, so p and q overlap like a real pair. Two cases, forced so that the work is known:
//   reject=0 ("all accepted")  every drafted token has p(x) >= q(x): k scalar tests, then the
//                              bonus row p_k is read in full (pass 1) and scanned (pass 2);
//   reject=1 ("reject last")   x_0 ... x_(k-2) accepted, x_(k-1) has p(x) = 0: k scalar tests,
//                              then rows p_(k-1) and q_(k-1) are read in full for the residual.
//                              This is the most verify ever has to read.
// Bytes processed = what an exact verifier must read in that case: the full rows (V * 4 bytes
// each) plus 8 bytes per acceptance test. Pass 2 re-reads part of the rows from cache; it is
// work, not traffic, and is not counted.
//   cold=1  the inputs rotate over independent copies totalling >= 512 MiB of touched rows, so
//           every row comes from DRAM: the comparison with BM_read_sum;
//   cold=0  the same inputs every iteration (cache-resident): the upper bound, and what happens
//           in a decoder, where the rows were just written by the logits processing.
// Each copy is mmap'ed and only the entries verify reads are written, so the untouched rows of
// the (k+1) x V and k x V buffers cost address space, not memory.
// BM_process and BM_round (logits -> decisions, the "Sampling at V = 151936" section of
// docs/benchmarks.md) are described above their code.
// Time is CPU time (Google Benchmark's default): the same as wall time for this single-threaded
// code on an idle machine, and less disturbed when the machine is shared.
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include <benchmark/benchmark.h>

#include "sort_reference_processing.hpp"
#include "specdec/decoder/sampler.hpp"
#include "specdec/sampling/batch.hpp"

namespace {

using specdec::token_t;

constexpr std::size_t kRooflineBytes = std::size_t{512} << 20;
constexpr std::size_t kColdBytes = std::size_t{512} << 20;

/// An anonymous mapping whose pages exist only once written.
class Mapping {
 public:
  explicit Mapping(std::size_t bytes) : bytes_(bytes) {
    ptr_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0);
    if (ptr_ == MAP_FAILED) throw std::runtime_error("bench_sampling: mmap failed");
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  ~Mapping() {
    if (ptr_ != nullptr) munmap(ptr_, bytes_);
  }
  [[nodiscard]] float* data() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_;
  std::size_t bytes_;
};

/// Sum of n floats with 16 independent partial sums (vectorisable without -ffast-math).
float read_sum(const float* x, std::size_t n) {
  float acc[16] = {};
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    for (std::size_t j = 0; j < 16; ++j) acc[j] += x[i + j];
  }
  float s = 0;
  for (const float a : acc) s += a;
  return s;
}

void BM_read_sum(benchmark::State& state) {
  const std::size_t n = kRooflineBytes / sizeof(float);
  std::vector<float> buffer(n);
  for (std::size_t i = 0; i < n; ++i) buffer[i] = static_cast<float>(i & 1023u) * 1e-3f;
  for (auto _ : state) benchmark::DoNotOptimize(read_sum(buffer.data(), n));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kRooflineBytes));
}

/// softmax(logits) as floats.
std::vector<float> softmax(const std::vector<double>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> e(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) total += e[i] = std::exp(logits[i] - top);
  std::vector<float> out(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(e[i] / total);
  return out;
}

/// A few realistic (p, q) row pairs of one vocabulary size, made once and copied around.
struct Templates {
  static constexpr std::size_t kPairs = 4;
  std::vector<std::vector<float>> p, q;
  explicit Templates(std::size_t vocab) {
    std::mt19937_64 gen(vocab);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t t = 0; t < kPairs; ++t) {
      std::vector<double> logits(vocab), noisy(vocab);
      for (std::size_t i = 0; i < vocab; ++i) {
        logits[i] = 3.0 * normal(gen);
        noisy[i] = logits[i] + normal(gen);
      }
      p.push_back(softmax(logits));
      q.push_back(softmax(noisy));
    }
  }
};

const Templates& templates(std::size_t vocab) {
  static std::vector<std::pair<std::size_t, std::unique_ptr<Templates>>> cache;
  for (const auto& [v, t] : cache) {
    if (v == vocab) return *t;
  }
  cache.emplace_back(vocab, std::make_unique<Templates>(vocab));
  return *cache.back().second;
}

/// The token of a row pair with the largest p - q (so p(x) >= q(x): always accepted).
token_t accepted_token(const std::vector<float>& p, const std::vector<float>& q) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < p.size(); ++i) {
    if (p[i] - q[i] > p[best] - q[best]) best = i;
  }
  return static_cast<token_t>(best);
}

/// One batch of verify inputs in its own mappings: p (B x (k+1) x V), q (B x k x V), draft.
struct Instance {
  Mapping p, q;
  std::vector<token_t> draft;
  Instance(std::size_t batch, std::size_t k, std::size_t vocab, bool reject, std::size_t salt)
      : p(batch * (k + 1) * vocab * sizeof(float)),
        q(std::max<std::size_t>(batch * k * vocab, 1) * sizeof(float)),
        draft(batch * k) {
    const Templates& t = templates(vocab);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t i = 0; i < k; ++i) {
        const std::size_t pair = (salt + b + i) % Templates::kPairs;
        float* p_row = p.data() + (b * (k + 1) + i) * vocab;
        float* q_row = q.data() + (b * k + i) * vocab;
        token_t x = accepted_token(t.p[pair], t.q[pair]);
        if (reject && i + 1 == k) {
          // The last drafted token is the draft's favourite, which the target rules out: the
          // row pair is written in full (verify reads it), with p(x) moved to 0.
          x = static_cast<token_t>(std::max_element(t.q[pair].begin(), t.q[pair].end()) -
                                   t.q[pair].begin());
          std::memcpy(p_row, t.p[pair].data(), vocab * sizeof(float));
          std::memcpy(q_row, t.q[pair].data(), vocab * sizeof(float));
          p_row[(static_cast<std::size_t>(x) + 1) % vocab] += p_row[x];
          p_row[x] = 0.0f;
        } else {
          // Accepted: verify reads only p(x) and q(x).
          p_row[x] = t.p[pair][static_cast<std::size_t>(x)];
          q_row[x] = t.q[pair][static_cast<std::size_t>(x)];
        }
        draft[b * k + i] = x;
      }
      if (!reject || k == 0) {
        const std::size_t pair = (salt + b + k) % Templates::kPairs;
        std::memcpy(p.data() + (b * (k + 1) + k) * vocab, t.p[pair].data(), vocab * sizeof(float));
      }
    }
  }
};

void BM_verify_chain(benchmark::State& state) {
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const auto k = static_cast<std::size_t>(state.range(1));
  const auto batch = static_cast<std::size_t>(state.range(2));
  const bool reject = state.range(3) != 0;
  const bool cold = state.range(4) != 0;

  // Bytes an exact verifier must read per call (see the top of this file).
  const std::size_t full_rows = reject ? 2 : 1;
  const std::size_t bytes_per_call = batch * (full_rows * vocab * sizeof(float) + k * 8);
  const std::size_t touched_per_instance = batch * full_rows * vocab * sizeof(float);
  const std::size_t copies =
      cold ? (kColdBytes + touched_per_instance - 1) / touched_per_instance : 1;

  // The instances of the current configuration, kept across the calls Google Benchmark makes
  // for one configuration (iteration-count probes and repetitions): building 512 MiB of cold
  // copies takes longer than measuring them.
  static std::vector<std::int64_t> cached_key;
  static std::vector<Instance> instances;
  const std::vector<std::int64_t> key{state.range(0), state.range(1), state.range(2),
                                      state.range(3), state.range(4)};
  if (key != cached_key) {
    instances.clear();
    instances.reserve(copies);
    for (std::size_t c = 0; c < copies; ++c) instances.emplace_back(batch, k, vocab, reject, c);
    cached_key = key;
  }

  const std::size_t p_size = batch * (k + 1) * vocab;
  const std::size_t q_size = batch * k * vocab;
  std::vector<std::int32_t> accepted(batch);
  std::vector<token_t> emitted(batch * (k + 1));
  std::uint64_t counter = 0;
  std::size_t next = 0;
  std::int64_t accepted_total = 0;
  for (auto _ : state) {
    const Instance& in = instances[next];
    next = next + 1 == copies ? 0 : next + 1;
    specdec::sampling::verify_chain_batch<float>(
        std::span<const float>(in.p.data(), p_size), std::span<const float>(in.q.data(), q_size),
        in.draft, batch, k, vocab, /*seed=*/42, counter, accepted, emitted);
    counter += k + 1;
    accepted_total += accepted[0];
    benchmark::DoNotOptimize(emitted.data());
  }
  if (state.iterations() > 0 &&
      accepted_total != static_cast<std::int64_t>(reject ? k - 1 : k) * state.iterations()) {
    state.SkipWithError("the forced case did not happen (wrong accepted count)");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes_per_call));
}

// ---------------------------------------------------------------- logits -> decisions
//
// BM_process: one row of LM-like logits (a N(0, 2^2) body and 20 tokens lifted by 8 ... 16: a
// peaked distribution with a long tail, like a code model's) under one setting:
//   impl 0  the sort-based processing as it was (tests/support/sort_reference_processing.hpp);
//   impl 1  process_logits (the row plan, materialised);
//   impl 2  p(x) alone (plan_processing + prob(x)), what an accepted drafted token costs;
//           for greedy, the argmax alone (detail::scan_logits), what a greedy round reads.
//   mode    0 greedy, 1 T = 0.8, 2 top-k 40, 3 top-p 0.95, 4 min-p 0.05 (the last three at T = 1).
//   isa     the weight pass's vectors (sampling::detail::PassIsa): 2 16-byte (SSE2), 3 AVX2,
//           4 AVX-512 (skipped where the CPU lacks it); the decisions are the same on each.
// Bytes processed = the logits read once (V * 4): the memory roofline of any exact processing.
//
// BM_round: the sampling of one speculative round with k = 4 on a HostSampler: 4 draft rows
// (process + draw) and the verification of the 5 target rows. The draft's logits are the
// target's plus N(0, 1) noise, so rounds end in rejections and bonuses alike.
//   impl 0  as it was: every row processed in full (sort-based), then verify_chain;
//   impl 1  HostSampler (lazy: argmaxes when greedy; p(x) alone for accepted tokens).
//   head    0: the draft's rows cover the vocabulary; 1: a draft with a restricted output head,
//           its logits beyond id 32768 masked (cpu::kMaskedLogit, as `--draft-head 32768`).

std::vector<float> lm_logits(std::size_t vocab, std::uint64_t seed, float noise = 0.0f,
                             const std::vector<float>* base = nullptr) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> lift(8.0f, 16.0f);
  std::uniform_int_distribution<std::size_t> token(0, vocab - 1);
  std::vector<float> logits(vocab);
  if (base != nullptr) {
    for (std::size_t i = 0; i < vocab; ++i) logits[i] = (*base)[i] + noise * normal(gen);
    return logits;
  }
  for (float& l : logits) l = 2.0f * normal(gen);
  for (int j = 0; j < 20; ++j) logits[token(gen)] += lift(gen);
  return logits;
}

specdec::sampling::SamplingParams setting(std::int64_t mode) {
  switch (mode) {
    case 0:
      return {.temperature = 0.0f};
    case 1:
      return {.temperature = 0.8f};
    case 2:
      return {.temperature = 1.0f, .top_k = 40};
    case 3:
      return {.temperature = 1.0f, .top_p = 0.95f};
    default:
      return {.temperature = 1.0f, .min_p = 0.05f};
  }
}

/// Forces the weight pass onto the ISA of argument `arg`; false (and the benchmark skipped)
/// when this CPU cannot run it.
bool use_isa(benchmark::State& state, int arg) {
  namespace sd = specdec::sampling::detail;
  const auto isa = static_cast<sd::PassIsa>(state.range(arg));
  if (!sd::pass_isa_supported(isa)) {
    state.SkipWithError("this CPU cannot run that ISA");
    return false;
  }
  sd::set_pass_isa(isa);
  return true;
}

void BM_process(benchmark::State& state) {
  namespace sp = specdec::sampling;
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const std::int64_t impl = state.range(1);
  const sp::SamplingParams params = setting(state.range(2));
  if (!use_isa(state, 3)) return;
  const std::vector<float> logits = lm_logits(vocab, 7);
  std::vector<float> probs(vocab);
  const std::size_t x = sp::argmax<float>(logits);
  for (auto _ : state) {
    if (impl == 0) {
      specdec::test::sort_reference_process<float>(logits, params, std::span<float>(probs));
    } else if (impl == 1) {
      sp::process_logits<float>(logits, params, std::span<float>(probs));
    } else if (params.greedy()) {
      benchmark::DoNotOptimize(sp::detail::scan_logits(logits.data(), vocab).argmax);
    } else {
      benchmark::DoNotOptimize(
          sp::plan_processing<float>(logits, params, std::span<float>(probs)).prob(x));
    }
    benchmark::DoNotOptimize(probs.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(vocab * sizeof(float)));
}

void BM_round(benchmark::State& state) {
  namespace sp = specdec::sampling;
  constexpr std::size_t k = 4;
  const auto vocab = static_cast<std::size_t>(state.range(0));
  const bool lazy = state.range(1) != 0;
  const sp::SamplingParams params = setting(state.range(2));
  if (!use_isa(state, 3)) return;
  const std::size_t head = state.range(4) != 0 ? std::min<std::size_t>(32768, vocab / 4) : vocab;
  std::vector<float> target((k + 1) * vocab);
  std::vector<float> draft(k * vocab);
  for (std::size_t r = 0; r <= k; ++r) {
    const std::vector<float> row = lm_logits(vocab, 100 + r);
    std::copy(row.begin(), row.end(), target.begin() + static_cast<std::ptrdiff_t>(r * vocab));
    if (r < k) {
      const std::vector<float> noisy = lm_logits(vocab, 200 + r, 1.0f, &row);
      std::copy(noisy.begin(), noisy.end(), draft.begin() + static_cast<std::ptrdiff_t>(r * vocab));
      std::fill(draft.begin() + static_cast<std::ptrdiff_t>(r * vocab + head),
                draft.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab),
                std::numeric_limits<float>::lowest());
    }
  }
  const auto row_of = [&](const std::vector<float>& rows, std::size_t r) {
    return std::span<const float>(rows).subspan(r * vocab, vocab);
  };
  specdec::HostSampler sampler(vocab, k);
  sampler.begin(params, 42);
  sp::PhiloxStream target_rng(42, specdec::kTargetStream);
  sp::PhiloxStream draft_rng(42, specdec::kDraftStream);
  std::vector<float> p((k + 1) * vocab);
  std::vector<float> q(k * vocab);
  std::vector<token_t> drafted(k);
  std::int64_t accepted = 0;
  for (auto _ : state) {
    if (lazy) {
      sampler.begin_round(1);
      for (std::size_t i = 0; i < k; ++i)
        sampler.draft_rows({draft.data() + i * vocab, 1, vocab, specdec::Memory::host}, 1, i);
      const auto verdict = sampler.verify({target.data(), k + 1, vocab, specdec::Memory::host}, k,
                                          specdec::Proposal::sampled, 0);
      accepted += static_cast<std::int64_t>(verdict.accepted);
      benchmark::DoNotOptimize(verdict.next);
    } else {
      for (std::size_t i = 0; i < k; ++i) {
        const std::span<float> qi = std::span<float>(q).subspan(i * vocab, vocab);
        specdec::test::sort_reference_process<float>(row_of(draft, i), params, qi);
        drafted[i] = params.greedy() ? static_cast<token_t>(sp::argmax<float>(qi))
                                     : sp::sample_from<float>(qi, draft_rng.next());
      }
      for (std::size_t r = 0; r <= k; ++r)
        specdec::test::sort_reference_process<float>(row_of(target, r), params,
                                                     std::span<float>(p).subspan(r * vocab, vocab));
      const sp::VerifyResult verdict =
          params.greedy() ? sp::verify_chain_greedy<float>(p, drafted, vocab)
                          : sp::verify_chain<float>(p, q, drafted, vocab, target_rng);
      accepted += static_cast<std::int64_t>(verdict.accepted);
      benchmark::DoNotOptimize(verdict.next);
    }
  }
  state.counters["accepted/round"] =
      benchmark::Counter(static_cast<double>(accepted), benchmark::Counter::kAvgIterations);
  // The logits of the round read once: the roofline of any exact round sampling.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>((2 * k + 1) * vocab * sizeof(float)));
}

}  // namespace

BENCHMARK(BM_process)
    ->ArgNames({"V", "impl", "mode", "isa"})
    ->ArgsProduct({{4096, 151936}, {0, 1, 2}, {0, 1, 2, 3, 4}, {2, 3, 4}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_round)
    ->ArgNames({"V", "impl", "mode", "isa", "head"})
    ->ArgsProduct({{4096, 151936}, {0, 1}, {0, 1, 2, 3, 4}, {2, 3, 4}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_read_sum)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_verify_chain)
    ->ArgNames({"V", "k", "B", "reject", "cold"})
    ->ArgsProduct({{32000, 128256, 151936}, {1, 4, 8, 16}, {1, 8}, {0, 1}, {1, 0}})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
