// Google Benchmark of the CPU backend's matrix kernels, one thread: BM_matmul on a weight matrix
// that fits in L2 (so the numbers show the compute side of each kernel, not the memory system),
// BM_matmul_stream on one of about 768 MB, more than the last-level cache (the memory side: what
// one core streams, and whether the work for n tokens hides behind it), BM_read_stream the plain
// read of as many bytes (its roofline), BM_vpdpbusd_peak the AVX512-VNNI multiply-add peak,
// BM_attention one token's attention for a group of query heads:
//   specdec_bench_cpu_kernels --benchmark_filter='BM_matmul/11/'
// Arguments: dtype (its index in the DType enum: 0 f32, 1 f16, 2 bf16, 3 q4_0, 4 q4_1, 5 q5_0,
// 6 q5_1, 7 q8_0, 8 q2_k, 9 q3_k, 10 q4_k, 11 q5_k, 12 q6_k, 13 iq4_nl, 14 iq4_xs), tokens n,
// Isa (0 portable .. 3 amx), and for the integer types the layout (0 the file's, 1 repacked at
// load for the AVX512-VNNI kernel: cpu::repack_weights). Counters: weight bytes streamed per second
// (what must exceed the DRAM bandwidth per core for decode to be memory-bound) and tokens x weights
// per second. Weights are random blocks (random_blocks(): finite scales; values do not change
// timings).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/random_blocks.hpp"
#include "specdec/model/weights.hpp"

namespace {

using namespace specdec;
using cpu::Isa;

/// Which kernel an Isa level picks beyond its name: the AVX-512 extensions it uses when present.
std::string kernel_note(Isa isa, DType dtype) {
  if (isa != Isa::avx512) return "";
  if (!is_float_dtype(dtype)) return cpu::cpu_features().avx512_vnni ? " (vnni)" : " (avx2 kernel)";
  if (dtype == DType::bf16 && cpu::cpu_features().avx512_bf16) return " (avx512_bf16)";
  return "";
}

/// A weight matrix of `rows` x `cols` random blocks, made once per (dtype, shape) and kept: the
/// streamed ones are large.
const std::vector<std::byte>& weights(DType dtype, std::size_t rows, std::size_t cols) {
  struct Entry {
    DType dtype;
    std::size_t rows, cols;
    std::vector<std::byte> bytes;
  };
  static std::vector<std::unique_ptr<Entry>> cache;
  for (const auto& e : cache)
    if (e->dtype == dtype && e->rows == rows && e->cols == cols) return e->bytes;
  if (rows * cols > (std::size_t{1} << 26)) cache.clear();  // one large matrix at a time
  auto e = std::make_unique<Entry>(Entry{dtype, rows, cols, {}});
  e->bytes.resize(rows * dtype_row_bytes(dtype, cols, "bench"));
  random_blocks(dtype, e->bytes, 1, 1.0f);
  cache.push_back(std::move(e));
  return cache.back()->bytes;
}

void run_matmul(benchmark::State& state, std::size_t rows, std::size_t cols) {
  const auto dtype = static_cast<DType>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto isa = static_cast<Isa>(state.range(2));
  if (!cpu::isa_supported(isa)) {
    state.SkipWithError("Isa not supported here");
    return;
  }
  const std::vector<std::byte>& bytes = weights(dtype, rows, cols);
  cpu::MatrixRef m{dtype, bytes.data(), rows, cols, dtype_row_bytes(dtype, cols, "bench")};
  const bool repack = state.range(3) != 0;
  if (repack && cpu::repacked_bytes(isa, m) == 0) {
    state.SkipWithError("no repacked layout for this dtype and Isa");
    return;
  }
  // The repacked copy lives as long as the run (the file's bytes stay cached for the next).
  cpu::WeightBuffer repacked;
  if (repack) {
    repacked = cpu::WeightBuffer(cpu::repacked_bytes(isa, m));
    m = cpu::repack_weights(isa, m, repacked.data());
  }
  std::vector<float> x(n * cols);
  random_blocks(DType::f32, {reinterpret_cast<std::byte*>(x.data()), x.size() * 4}, 2, 1.0f);
  cpu::PackedInput packed;
  packed.pack(isa, dtype, x.data(), n, cols, cols);
  std::vector<float> y(n * rows);
  for (auto _ : state) {
    cpu::matmul(isa, m, packed, 0, rows, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_bytes/s"] = benchmark::Counter(
      static_cast<double>(bytes.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(rows * cols * n),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(dtype_name(dtype)) + " " + cpu::isa_name(isa) +
                 kernel_note(isa, dtype) + (repack ? " repacked" : ""));
}

/// A matrix that fits in L2: the compute side of each kernel.
void BM_matmul(benchmark::State& state) { run_matmul(state, 128, 2048); }

/// About 768 MB of weights, more than the last-level cache: the memory side.
void BM_matmul_stream(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  run_matmul(state, (std::size_t{768} << 20) / dtype_row_bytes(dtype, 2048, "bench") / 16 * 16,
             2048);
}

/// The roofline of BM_matmul_stream: one thread summing a 768 MB buffer of uint64 (8 partial
/// sums, vectorised by the compiler), in the same process right next to it.
void BM_read_stream(benchmark::State& state) {
  static const std::vector<std::uint64_t> buffer((std::size_t{768} << 20) / 8, 1);
  for (auto _ : state) {
    std::uint64_t s[8] = {};
    for (std::size_t i = 0; i < buffer.size(); i += 8)
      for (int j = 0; j < 8; ++j) s[j] += buffer[i + j];
    benchmark::DoNotOptimize(s);
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(buffer.size() * 8),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

/// The multiply-add peak of one core's AVX512-VNNI: vpdpbusd on registers only, 12 independent
/// accumulators (more than its latency x throughput), 64 8-bit multiply-adds per instruction.
/// Written as assembly, so that no compiler flag is needed; skipped without AVX512-VNNI. The
/// integer kernels' token loop divided by this is their arithmetic efficiency.
void BM_vpdpbusd_peak(benchmark::State& state) {
  if (!cpu::cpu_features().avx512_vnni) {
    state.SkipWithError("no AVX512-VNNI here");
    return;
  }
  constexpr long iterations = 1 << 20;  // of 12 instructions each
#if defined(__x86_64__)
  for (auto _ : state) {
    long n = iterations;
    __asm__ volatile(
        "vpxord %%zmm12, %%zmm12, %%zmm12\n"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n"
        "1:\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm0\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm1\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm2\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm3\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm4\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm5\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm6\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm7\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm8\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm9\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm10\n"
        "vpdpbusd %%zmm12, %%zmm13, %%zmm11\n"
        "dec %0\n"
        "jnz 1b\n"
        "vzeroupper\n"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
          "xmm11", "xmm12", "xmm13", "cc");
  }
#endif
  state.counters["MAC/s"] = benchmark::Counter(static_cast<double>(iterations) * 12 * 64,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.counters["vpdpbusd/s"] = benchmark::Counter(static_cast<double>(iterations) * 12,
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

void BM_pack(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const Isa isa = cpu::best_isa();
  const std::size_t cols = 2048;
  std::vector<float> x(n * cols, 0.5f);
  cpu::PackedInput packed;
  for (auto _ : state) packed.pack(isa, dtype, x.data(), n, cols, cols);
  state.SetLabel(dtype_name(dtype));
}

/// The attention of one token's query heads that share a K/V head (grouped-query attention),
/// the Qwen2.5 shape: head_dim 128, an f16 cache (it stays in L2 up to a few thousand positions).
/// Arguments: Isa, query heads per K/V head, positions attended to, and the calls: 0 one call per
/// head (AttentionArgs::heads = 1), 1 one call for the group. Counter: positions x heads per
/// second.
void BM_attention(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const auto heads = static_cast<std::size_t>(state.range(1));
  const auto count = static_cast<std::size_t>(state.range(2));
  const bool grouped = state.range(3) != 0;
  if (!cpu::isa_supported(isa)) {
    state.SkipWithError("Isa not supported here");
    return;
  }
  constexpr std::size_t head_dim = 128;
  std::vector<float> q(heads * head_dim), out(heads * head_dim), scores(heads * count);
  std::vector<std::uint16_t> k(count * head_dim), v(count * head_dim);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = fp32_to_fp16(static_cast<float>(i % 13) * 0.02f - 0.12f);
    v[i] = fp32_to_fp16(static_cast<float>(i % 11) * 0.03f - 0.15f);
  }
  cpu::AttentionArgs a;
  a.k = k.data();
  a.v = v.data();
  a.kv_f16 = true;
  a.count = count;
  a.head_dim = head_dim;
  a.row_stride = head_dim;
  a.scale = 0.088f;
  for (auto _ : state) {
    for (std::size_t h = 0; h < heads; h += grouped ? heads : 1) {
      a.heads = grouped ? heads : 1;
      a.q = q.data() + h * head_dim;
      a.out = out.data() + h * head_dim;
      a.scores = scores.data() + h * count;
      cpu::attend(isa, a);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["positions x heads/s"] = benchmark::Counter(
      static_cast<double>(count * heads), benchmark::Counter::kIsIterationInvariantRate);
}

/// Every DType's index.
std::vector<std::int64_t> all_dtype_indices() {
  std::vector<std::int64_t> v;
  for (DType t : all_dtypes()) v.push_back(static_cast<std::int64_t>(t));
  return v;
}

}  // namespace

BENCHMARK(BM_matmul)
    ->ArgsProduct({all_dtype_indices(), {1, 2, 4, 5, 8, 16}, {0, 1, 2, 3}, {0, 1}})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_stream)
    ->ArgsProduct({all_dtype_indices(),
                   {1, 2, 4, 5, 8, 16},
                   {static_cast<int>(Isa::avx2), static_cast<int>(Isa::avx512)},
                   {0, 1}})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_read_stream)->MeasureProcessCPUTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_vpdpbusd_peak)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_attention)
    ->ArgsProduct({{static_cast<int>(Isa::avx2), static_cast<int>(Isa::avx512)},
                   {1, 6, 7},
                   {32, 300, 1000, 4000},
                   {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_pack)->ArgsProduct({{0, 2, 7, 10}, {1, 16}})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
