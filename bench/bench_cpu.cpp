// bench_cpu: CPU backend decode speed, multi-token cost and memory-roofline fraction.
//
//   bench_cpu MODEL.gguf [MODEL.gguf ...] [--threads 1,2] [--repeats 15] [--noisy]
//
// For each model and thread count it prints:
//   - the read bandwidth this binary measures right before and after (best of 3 + 3 passes of
//     three probes over 1 GiB, same thread count, 16 streams per thread, see read_bandwidth):
//     the roofline's denominator;
//   - T(n), the median wall time of one forward call of n = 1, 2, 4, 8, 16 tokens after a 32-token
//     prompt (the call is rolled back after each repeat, so every repeat sees the same context);
//   - decode tokens/s = 1 / T(1), the roofline time = (bytes of weights read per forward + KV
//     cache read) / bandwidth, and its fraction of T(1) (median and best);
//   - T(n) / T(1).
// --noisy repeats the decode measurement at 1 and 2 threads while one competing CPU-bound process
// (a busy loop, forked) runs. Then the resident memory of the last model: file-backed pages (the
// memory-mapped weights) and anonymous ones (KV cache and buffers).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

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

/// A buffer larger than the last-level cache, touched once (allocated before any model so that
/// the resident-memory figures of the models do not include it).
std::vector<std::uint64_t>& bandwidth_buffer() {
  static std::vector<std::uint64_t> buffer = [] {
    // 1 GiB, plus room for the prefetches that run ahead of the last stream.
    std::vector<std::uint64_t> b((std::size_t{1} << 30) / 8 + 512);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = i;
    return b;
  }();
  return buffer;
}

/// Read bandwidth in bytes/s with `threads` threads streaming disjoint parts of the buffer: the
/// best of `passes` passes of each probe. Probes: 16 streams over consecutive sixteenths of a
/// thread's part, advanced together (more lines in flight than one sequential stream gets, and
/// the access pattern of the kernels, which stream 16 or 32 weight rows at once), without and
/// with software prefetching (T2 hint, 512 B and 2 KiB ahead of each stream) as the AVX-512
/// kernels do: on some machines prefetching moves more bytes per second than the hardware
/// prefetchers alone, and the roofline must be the fastest read this binary can do.
double read_bandwidth(std::size_t threads, int passes = 3) {
  const std::vector<std::uint64_t>& buffer = bandwidth_buffer();
  constexpr std::size_t streams = 16;
  const std::size_t per = (buffer.size() - 512) / threads;
  const std::size_t len = per / streams / 8 * 8;  // uint64 per stream, whole lines
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    for (const std::size_t distance : {std::size_t{0}, std::size_t{64}, std::size_t{256}}) {
      std::vector<std::uint64_t> sums(threads * 8);
      const auto t0 = Clock::now();
      std::vector<std::thread> pool;
      for (std::size_t t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          std::uint64_t s[streams][8] = {};
          const std::uint64_t* base = buffer.data() + t * per;
          for (std::size_t i = 0; i < len; i += 8)
            for (std::size_t k = 0; k < streams; ++k) {
              const std::uint64_t* line = base + k * len + i;
              // Past the end of a stream the prefetch lands in the next one or in the slack
              // at the end of the buffer: the same count of lines either way.
              if (distance != 0) __builtin_prefetch(line + distance, 0, 1);
              for (int j = 0; j < 8; ++j) s[k][j] += line[j];
            }
          for (std::size_t k = 0; k < streams; ++k)
            for (int j = 0; j < 8; ++j) sums[t * 8 + j] += s[k][j];
        });
      for (auto& th : pool) th.join();
      const double bytes = static_cast<double>(len * streams * threads * sizeof(std::uint64_t));
      best = std::max(best, bytes / seconds_since(t0));
      if (std::find(sums.begin(), sums.end(), 42) != sums.end())
        fmt::print("");  // keep the sums alive
    }
  }
  return best;
}

/// Bytes of weights one forward call reads: every layer matrix and the output head (the embedding
/// contributes n rows, negligible).
std::size_t weight_bytes_per_forward(const specdec::ModelConfig& c, const specdec::WeightStore& w) {
  std::size_t total = 0;
  for (const auto& [name, t] : w.tensors()) {
    if (name.starts_with("blk.") && t.shape.size() == 2) total += t.nbytes;
  }
  const specdec::Tensor* out = w.find("output.weight");
  total += (out != nullptr && !c.tied_embeddings ? out : &w.get("token_embd.weight"))->nbytes;
  return total;
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
  app.add_flag("--noisy", noisy, "also time decode next to a competing CPU-bound process");
  CLI11_PARSE(app, argc, argv);

  bandwidth_buffer();
  fmt::print("# bench_cpu: isa {}, physical cores {}, repeats {}, context {}\n",
             specdec::cpu::isa_name(specdec::cpu::default_isa()), specdec::cpu::physical_cores(),
             repeats, context);
  fmt::print(
      "| model | threads | GB/s | weights MB | T(1) ms | tok/s | roofline ms | fraction (median / "
      "best) |");
  for (std::size_t n : ns)
    if (n != 1) fmt::print(" T({})/T(1) |", n);
  fmt::print("\n|---|---:|---:|---:|---:|---:|---:|---:|");
  for (std::size_t n : ns)
    if (n != 1) fmt::print("---:|");
  fmt::print("\n");

  struct MemoryRow {
    std::string label;
    double file_mb, weights_touched_mb, anon_mb, kv_allocated_mb;
  };
  std::vector<MemoryRow> memory_rows;
  bool failed = false;
  for (const std::string& path : models) try {
      const Memory before = resident_memory();
      const specdec::LoadedModel loaded = specdec::load_model(path);
      const std::size_t weight_bytes = weight_bytes_per_forward(loaded.config, *loaded.weights);
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
        std::vector<Timing> t;
        for (std::size_t n : ns) t.push_back(time_forward(model, n, context, repeats));
        bandwidth = std::max(bandwidth, read_bandwidth(threads));
        // KV read per decode step: K and V of every cached position, every layer.
        const std::size_t kv_read =
            loaded.config.n_layers * 2 * loaded.config.kv_dim() * (context + 1) * 4;
        const double roofline = static_cast<double>(weight_bytes + kv_read) / bandwidth;
        fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.2f} | {:.1f} | {:.2f} | {:.2f} / {:.2f} |",
                   label, threads, bandwidth / 1e9, static_cast<double>(weight_bytes) / 1e6,
                   t[0].median * 1e3, 1.0 / t[0].median, roofline * 1e3, roofline / t[0].median,
                   roofline / t[0].best);
        for (std::size_t i = 1; i < ns.size(); ++i)
          fmt::print(" {:.2f} |", t[i].median / t[0].median);
        fmt::print("\n");
        std::fflush(stdout);
        if (threads == thread_counts.back()) {
          const Memory after = resident_memory();
          memory_rows.push_back(
              {label, static_cast<double>(loaded.weights->total_bytes()) / 1e6,
               (static_cast<double>(after.file_kb) - static_cast<double>(before.file_kb)) / 1e3,
               (static_cast<double>(after.anon_kb) - static_cast<double>(before.anon_kb)) / 1e3,
               static_cast<double>(model.kv_cache_bytes()) / 1e6});
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
      "(KV cache "
      "pages used, buffers) | KV cache allocation MB (full context) "
      "|\n|---|---:|---:|---:|---:|\n");
  for (const MemoryRow& m : memory_rows)
    fmt::print("| {} | {:.0f} | {:.0f} | {:.1f} | {:.0f} |\n", m.label, m.file_mb,
               m.weights_touched_mb, m.anon_mb, m.kv_allocated_mb);
  return failed ? 1 : 0;
} catch (const std::exception& e) {  // e.g. SPECDEC_CPU_ISA naming an unsupported level
  fmt::print(stderr, "bench_cpu: {}\n", e.what());
  return 1;
}
