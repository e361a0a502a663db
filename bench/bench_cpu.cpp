// bench_cpu: CPU backend decode speed, multi-token cost and memory-roofline fraction.
//
//   bench_cpu MODEL.gguf [MODEL.gguf ...] [--threads 1,2] [--repeats 15] [--noisy]
//
// For each model and thread count it prints:
//   - the read bandwidth this binary measures right before and after (best of 3 + 3 passes of
//     three probes over 2 GiB, same thread count, pinned threads, see read_bandwidth): the
//     roofline's denominator; next to it, in the same minutes, a plain OpenMP sum's bandwidth
//     (the baseline the probe must not fall below);
//   - T(n), the median wall time of one forward call of n = 1, 2, 4, 8, 16 tokens after a 32-token
//     prompt (the call is rolled back after each repeat, so every repeat sees the same context);
//   - decode tokens/s = 1 / T(1), the roofline time = (bytes of weights read per forward + KV
//     cache read) / bandwidth, and its fraction of T(1) (median and best);
//   - T(n) / T(1);
//   - with --prefill P (default 512; 0 = skip): prompt processing tokens/s, a forward of P tokens
//     on an empty cache (median of --prefill-repeats calls after one warm-up), "ppP" as llama-bench
//     names it.
// --noisy repeats the decode measurement at 1 and 2 threads while one competing CPU-bound process
// (a busy loop, forked) runs. Then the resident memory of the last model: file-backed pages (the
// memory-mapped weights) and anonymous ones (KV cache and buffers).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_bytes.hpp"
#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using specdec::token_t;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// The read-bandwidth probe's buffer: 2 GiB, several times any last-level cache this benchmark
/// runs on, 2 MiB aligned and advised into transparent huge pages (fewer TLB misses: the probe
/// should find the fastest read the machine allows), touched once. Allocated before any model so
/// that the resident-memory figures of the models do not include it.
struct ProbeBuffer {
  static constexpr std::size_t bytes = std::size_t{2} << 30;
  std::uint64_t* data;
  std::size_t size;  // uint64 elements
};
const ProbeBuffer& probe_buffer() {
  static const ProbeBuffer buffer = [] {
    void* p = std::aligned_alloc(std::size_t{2} << 20, ProbeBuffer::bytes);
    if (p == nullptr) throw specdec::Error("bench_cpu: cannot allocate the 2 GiB probe buffer");
    madvise(p, ProbeBuffer::bytes, MADV_HUGEPAGE);  // a hint: failure only makes the probe slower
    auto* b = static_cast<std::uint64_t*>(p);
    const std::size_t n = ProbeBuffer::bytes / 8;
    for (std::size_t i = 0; i < n; ++i) b[i] = i;
    return ProbeBuffer{b, n};
  }();
  return buffer;
}

/// The CPUs of this process's affinity mask, in order (thread t of a probe is pinned to cpus[t]).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Sums of n uint64 (n a multiple of 64, p 64-byte aligned) with 8 independent accumulators of
// whole cache lines, as a tuned STREAM-style read kernel does: the loop issues one 64-byte load
// per cycle or so and never waits on an add, so only the memory system limits it. `distance`
// (bytes, 0 = none) adds a software prefetch that far ahead of every line.
__attribute__((target("avx512f"))) std::uint64_t sum_avx512(const std::uint64_t* p, std::size_t n,
                                                            std::size_t distance) {
  __m512i a[8];
  for (auto& x : a) x = _mm512_setzero_si512();
  const char* c = reinterpret_cast<const char*>(p);
  for (std::size_t i = 0; i < n * 8; i += 512) {
    if (distance != 0)
      for (int j = 0; j < 8; ++j) _mm_prefetch(c + i + distance + 64 * j, _MM_HINT_T0);
    for (int j = 0; j < 8; ++j)
      a[j] =
          _mm512_add_epi64(a[j], _mm512_load_si512(reinterpret_cast<const void*>(c + i + 64 * j)));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_epi64(a[0], a[j]);
  // (A store, not _mm512_reduce_add_epi64: GCC 12 warns about that intrinsic's undefined lanes.)
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, a[0]);
  std::uint64_t s = 0;
  for (const std::uint64_t x : lanes) s += x;
  return s;
}
__attribute__((target("avx2"))) std::uint64_t sum_avx2(const std::uint64_t* p, std::size_t n,
                                                       std::size_t distance) {
  __m256i a[8];
  for (auto& x : a) x = _mm256_setzero_si256();
  const char* c = reinterpret_cast<const char*>(p);
  for (std::size_t i = 0; i < n * 8; i += 256) {
    if (distance != 0)
      for (int j = 0; j < 4; ++j) _mm_prefetch(c + i + distance + 64 * j, _MM_HINT_T0);
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_add_epi64(a[j],
                              _mm256_load_si256(reinterpret_cast<const __m256i*>(c + i + 32 * j)));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_epi64(a[0], a[j]);
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a[0]);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

/// Read bandwidth in bytes/s with `threads` threads, each pinned to its own CPU of the affinity
/// mask and summing its own contiguous part of the probe buffer with the widest vector loads the
/// CPU has (8 accumulators), without and with software prefetching 1 KiB and 4 KiB ahead: the
/// best of `passes` passes of each variant. The threads start together (a spin barrier) and the
/// clock runs from the start until the last one finishes. The roofline must be the fastest read
/// this binary can do, so the variants that lose on a machine cost only time.
double read_bandwidth(std::size_t threads, int passes = 3) {
  const ProbeBuffer& buffer = probe_buffer();
  const std::vector<int> cpus = allowed_cpus();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  // Per thread: whole 4 KiB pages, and the prefetches of the last thread stay inside the buffer.
  const std::size_t per = (buffer.size - 1024) / threads / 512 * 512;
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    for (const std::size_t distance : {std::size_t{0}, std::size_t{1024}, std::size_t{4096}}) {
      std::vector<std::uint64_t> sums(threads);
      std::atomic<std::size_t> ready{0};
      std::atomic<bool> go{false};
      Clock::time_point t0;
      std::vector<std::thread> pool;
      for (std::size_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          if (!cpus.empty()) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpus[t % cpus.size()], &set);
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
          }
          ready.fetch_add(1);
          while (!go.load(std::memory_order_acquire)) {
          }
          const std::uint64_t* part = buffer.data + t * per;
          sums[t] = avx512 ? sum_avx512(part, per, distance) : sum_avx2(part, per, distance);
        });
      while (ready.load() != threads) std::this_thread::yield();
      t0 = Clock::now();
      go.store(true, std::memory_order_release);
      for (auto& th : pool) th.join();
      const double bytes = static_cast<double>(per * threads * sizeof(std::uint64_t));
      best = std::max(best, bytes / seconds_since(t0));
      if (std::find(sums.begin(), sums.end(), 42) != sums.end()) fmt::print("");  // keep sums
    }
  }
  return best;
}

/// The baseline the probe must beat: the simplest OpenMP sum over the same buffer (what a user
/// would write first; the compiler vectorises it for the build's baseline ISA), best of `passes`.
/// 0 when the build has no OpenMP.
double openmp_sum_bandwidth(std::size_t threads, int passes = 3) {
#ifndef _OPENMP
  return 0;
#endif
  const ProbeBuffer& buffer = probe_buffer();
  const std::uint64_t* b = buffer.data;
  const auto n = static_cast<std::ptrdiff_t>(buffer.size);
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    std::uint64_t s = 0;
    const auto t0 = Clock::now();
#pragma omp parallel for num_threads(static_cast <int>(threads)) reduction(+ : s) schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) s += b[i];
    best = std::max(best, static_cast<double>(buffer.bytes) / seconds_since(t0));
    if (s == 42) fmt::print("");
  }
  return best;
}

struct Timing {
  double median, best, mean;
};

/// T(n): forward of n tokens after `context` cached, rolled back after each repeat.
Timing time_forward(specdec::cpu::Transformer& model, std::size_t n, std::size_t context,
                    int repeats) {
  std::vector<token_t> tokens(n);
  std::mt19937 rng(static_cast<unsigned>(n));
  for (auto& t : tokens) t = static_cast<token_t>(rng() % model.vocab_size());
  std::vector<double> times;
  model.forward(tokens);  // warm-up
  model.rollback(context);
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    model.forward(tokens);
    times.push_back(seconds_since(t0));
    model.rollback(context);
  }
  double sum = 0;
  for (double t : times) sum += t;
  return {median(times), *std::min_element(times.begin(), times.end()),
          sum / static_cast<double>(times.size())};
}

struct Memory {
  std::size_t rss_kb = 0, file_kb = 0, anon_kb = 0;
};
Memory resident_memory() {
  std::ifstream in("/proc/self/status");
  std::string key;
  Memory m;
  while (in >> key) {
    std::size_t value = 0;
    if (key == "VmRSS:")
      in >> m.rss_kb;
    else if (key == "RssFile:")
      in >> m.file_kb;
    else if (key == "RssAnon:")
      in >> m.anon_kb;
    else
      continue;
    (void)value;
  }
  return m;
}

/// A forked busy loop (the "noisy neighbour"), killed when this goes out of scope.
class BusyProcess {
 public:
  BusyProcess() : pid_(fork()) {
    if (pid_ == 0) {
      volatile std::uint64_t x = 1;
      for (;;) x = x * 6364136223846793005ull + 1;
    }
  }
  ~BusyProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  BusyProcess(const BusyProcess&) = delete;
  BusyProcess& operator=(const BusyProcess&) = delete;

 private:
  pid_t pid_;
};

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"CPU backend benchmark: decode speed, T(n)/T(1), memory-roofline fraction"};
  std::vector<std::string> models;
  std::vector<std::size_t> thread_counts = {1, 2};
  std::vector<std::size_t> ns = {1, 2, 4, 8, 16};
  int repeats = 15;
  std::size_t context = 32;
  std::size_t prefill = 512;
  int prefill_repeats = 3;
  bool noisy = false;
  app.add_option("models", models, "GGUF files or Hugging Face folders")->required();
  app.add_option("--threads", thread_counts, "thread counts")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--tokens", ns, "tokens per forward call")->delimiter(',')->capture_default_str();
  app.add_option("--repeats", repeats, "timed calls per measurement (median reported)")
      ->capture_default_str();
  app.add_option("--context", context, "prompt length before the timed calls")
      ->capture_default_str();
  app.add_option("--prefill", prefill, "prompt tokens for the ppN column (0: skip it)")
      ->capture_default_str();
  app.add_option("--prefill-repeats", prefill_repeats, "timed prefill calls (median reported)")
      ->capture_default_str();
  app.add_flag("--noisy", noisy, "also time decode next to a competing CPU-bound process");
  CLI11_PARSE(app, argc, argv);

  probe_buffer();
  fmt::print("# bench_cpu: isa {}, physical cores {}, repeats {}, context {}\n",
             specdec::cpu::isa_name(specdec::cpu::default_isa()), specdec::cpu::physical_cores(),
             repeats, context);
  fmt::print(
      "| model | threads | probe GB/s | OpenMP sum GB/s | weights MB | T(1) ms | tok/s | roofline "
      "ms "
      "| fraction (median / best) |");
  for (std::size_t n : ns)
    if (n != 1) fmt::print(" T({})/T(1) |", n);
  if (prefill != 0) fmt::print(" pp{} tok/s |", prefill);
  fmt::print("\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (std::size_t n : ns)
    if (n != 1) fmt::print("---:|");
  if (prefill != 0) fmt::print("---:|");
  fmt::print("\n");

  struct MemoryRow {
    std::string label;
    double file_mb, weights_touched_mb, anon_mb, kv_allocated_mb, repacked_mb, repack_seconds;
  };
  std::vector<MemoryRow> memory_rows;
  bool failed = false;
  for (const std::string& path : models) try {
      const Memory before = resident_memory();
      const specdec::LoadedModel loaded = specdec::load_model(path);
      const std::size_t weight_bytes =
          specdec::bench::weight_bytes_per_forward(loaded.config, *loaded.weights);
      const std::string label = loaded.name.empty() ? path : loaded.name;
      for (std::size_t threads : thread_counts) {
        specdec::cpu::Transformer model(loaded, {.threads = threads});
        std::vector<token_t> prompt(context);
        for (std::size_t i = 0; i < context; ++i)
          prompt[i] = static_cast<token_t>((i * 7919) % loaded.config.vocab_size);
        model.forward(prompt);
        // The machine's bandwidth drifts with its other users: measure before and after, keep the
        // best.
        double bandwidth = read_bandwidth(threads);
        double openmp = openmp_sum_bandwidth(threads);
        std::vector<Timing> t;
        for (std::size_t n : ns) t.push_back(time_forward(model, n, context, repeats));
        double prefill_seconds = 0;
        if (prefill != 0) {
          model.rollback(0);
          prefill_seconds = time_forward(model, prefill, 0, prefill_repeats).median;
          model.forward(prompt);
        }
        bandwidth = std::max(bandwidth, read_bandwidth(threads));
        openmp = std::max(openmp, openmp_sum_bandwidth(threads));
        // KV read per decode step: K and V of every cached position, every layer.
        const std::size_t kv_read =
            specdec::bench::kv_bytes_per_forward(loaded.config, context + 1, 4);
        const double roofline = static_cast<double>(weight_bytes + kv_read) / bandwidth;
        fmt::print(
            "| {} | {} | {:.1f} | {:.1f} | {:.0f} | {:.2f} | {:.1f} | {:.2f} | {:.2f} / {:.2f} |",
            label, threads, bandwidth / 1e9, openmp / 1e9, static_cast<double>(weight_bytes) / 1e6,
            t[0].median * 1e3, 1.0 / t[0].median, roofline * 1e3, roofline / t[0].median,
            roofline / t[0].best);
        for (std::size_t i = 1; i < ns.size(); ++i)
          fmt::print(" {:.2f} |", t[i].median / t[0].median);
        if (prefill != 0) fmt::print(" {:.1f} |", static_cast<double>(prefill) / prefill_seconds);
        fmt::print("\n");
        std::fflush(stdout);
        if (threads == thread_counts.back()) {
          const Memory after = resident_memory();
          memory_rows.push_back(
              {label, static_cast<double>(loaded.weights->total_bytes()) / 1e6,
               (static_cast<double>(after.file_kb) - static_cast<double>(before.file_kb)) / 1e3,
               (static_cast<double>(after.anon_kb) - static_cast<double>(before.anon_kb)) / 1e3,
               static_cast<double>(model.kv_cache_bytes()) / 1e6,
               static_cast<double>(model.repacked_bytes()) / 1e6, model.repack_seconds()});
        }
      }

      if (noisy) {
        // One competing CPU-bound process. 1-thread and 2-thread decode alternate in 5 rounds of
        // `repeats` steps each (the neighbour's effect drifts), on two models that live through
        // all rounds (like a generation; the 2-thread model's ParallelismChooser keeps learning).
        BusyProcess neighbour;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::vector<std::unique_ptr<specdec::cpu::Transformer>> models;
        std::vector<std::vector<double>> means(2), medians(2);
        for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
          models.push_back(std::make_unique<specdec::cpu::Transformer>(
              loaded, specdec::cpu::Options{.threads = threads}));
          models.back()->forward(std::vector<token_t>(context, 1));
        }
        const auto before = models[1]->threading_stats();
        for (int round = 0; round < 5; ++round)
          for (std::size_t i = 0; i < 2; ++i) {
            const Timing t = time_forward(*models[i], 1, context, repeats);
            means[i].push_back(t.mean);
            medians[i].push_back(t.median);
          }
        const auto after = models[1]->threading_stats();
        for (std::size_t i = 0; i < 2; ++i)
          fmt::print(
              "noisy neighbour: {} threads={} decode T(1) mean {:.2f} ms (= {:.1f} tok/s), median "
              "{:.2f} ms (medians of 5 alternating rounds of {} steps)\n",
              label, i + 1, median(means[i]) * 1e3, 1.0 / median(means[i]),
              median(medians[i]) * 1e3, repeats);
        fmt::print(
            "noisy neighbour: the 2-thread model ran {} of {} steps on the calling thread alone\n",
            after.alone - before.alone,
            after.alone + after.with_workers - before.alone - before.with_workers);
      }
    } catch (const specdec::Error& e) {
      // A file that does not load (unsupported tensor type, bad file) is reported, not fatal to
      // the other models' measurements.
      std::fflush(stdout);
      fmt::print(stderr, "bench_cpu: {}\n", e.what());
      failed = true;
    }
  fmt::print(
      "\nResident memory added by each model (loaded, one Transformer, {} positions used):\n",
      context + 16);
  fmt::print(
      "| model | weights in the file MB | file-backed resident MB (mapped weights) | anonymous MB "
      "(repacked weights, KV cache pages used, buffers) | KV cache allocation MB (full context) "
      "| repacked weights MB (their mapped pages released) | repacking s "
      "|\n|---|---:|---:|---:|---:|---:|---:|\n");
  for (const MemoryRow& m : memory_rows)
    fmt::print("| {} | {:.0f} | {:.0f} | {:.1f} | {:.0f} | {:.0f} | {:.2f} |\n", m.label, m.file_mb,
               m.weights_touched_mb, m.anon_mb, m.kv_allocated_mb, m.repacked_mb, m.repack_seconds);
  return failed ? 1 : 0;
} catch (const std::exception& e) {  // e.g. SPECDEC_CPU_ISA naming an unsupported level
  fmt::print(stderr, "bench_cpu: {}\n", e.what());
  return 1;
}
