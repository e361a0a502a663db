// Google Benchmark of the CPU backend's matrix kernels, one thread: BM_matmul on a weight matrix
// that fits in L2 (so the numbers show the compute side of each kernel, not the memory system),
// BM_matmul_stream on one far larger than the caches (BF16 and Q8_0 only):
//   specdec_bench_cpu_kernels --benchmark_filter=BM_matmul/3/
// Arguments: dtype (0 f32, 1 f16, 2 bf16, 3 q8_0), tokens n, Isa (0 portable .. 3 amx).
// Counters: weight bytes streamed per second (what must exceed the DRAM bandwidth per core for
// decode to be memory-bound) and tokens x weights per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/weights.hpp"

namespace {

using namespace specdec;
using cpu::Isa;

constexpr DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0};

/// Which kernel an Isa level picks beyond its name: the AVX-512 extensions it uses when present.
std::string kernel_note(Isa isa, DType dtype) {
  if (isa != Isa::avx512) return "";
  if (dtype == DType::q8_0) return cpu::cpu_features().avx512_vnni ? " (vnni)" : " (avx2 kernel)";
  if (dtype == DType::bf16 && cpu::cpu_features().avx512_bf16) return " (avx512_bf16)";
  return "";
}

void run_matmul(benchmark::State& state, std::size_t rows, std::size_t cols) {
  const DType dtype = dtypes[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto isa = static_cast<Isa>(state.range(2));
  if (!cpu::isa_supported(isa)) {
    state.SkipWithError("Isa not supported here");
    return;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(rows * cols), x(n * cols);
  for (auto& v : w) v = u(rng);
  for (auto& v : x) v = u(rng);
  std::vector<std::byte> bytes;
  std::size_t row_bytes = 0;
  switch (dtype) {
    case DType::f32:
      row_bytes = cols * 4;
      bytes.resize(rows * row_bytes);
      std::memcpy(bytes.data(), w.data(), bytes.size());
      break;
    case DType::f16:
    case DType::bf16:
      row_bytes = cols * 2;
      bytes.resize(rows * row_bytes);
      for (std::size_t i = 0; i < w.size(); ++i) {
        const std::uint16_t h = dtype == DType::f16 ? fp32_to_fp16(w[i]) : fp32_to_bf16(w[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default:
      row_bytes = dtype_row_bytes(dtype, cols, "bench");
      bytes.resize(rows * row_bytes);
      for (std::size_t r = 0; r < rows; ++r)
        quant::quantize(dtype, std::span<const float>(w.data() + r * cols, cols),
                        std::span<std::byte>(bytes.data() + r * row_bytes, row_bytes));
  }
  const cpu::MatrixRef m{dtype, bytes.data(), rows, cols, row_bytes};
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
                 kernel_note(isa, dtype));
}

/// A matrix that fits in L2: the compute side of each kernel.
void BM_matmul(benchmark::State& state) { run_matmul(state, 128, 2048); }

/// A matrix far larger than the last-level cache (256 MB in BF16): what one thread gets from
/// memory, and whether a kernel's work for n tokens hides behind the weight stream.
void BM_matmul_stream(benchmark::State& state) { run_matmul(state, 65536, 2048); }

void BM_pack(benchmark::State& state) {
  const DType dtype = dtypes[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const Isa isa = cpu::best_isa();
  const std::size_t cols = 2048;
  std::vector<float> x(n * cols, 0.5f);
  cpu::PackedInput packed;
  for (auto _ : state) packed.pack(isa, dtype, x.data(), n, cols, cols);
  state.SetLabel(dtype_name(dtype));
}

}  // namespace

BENCHMARK(BM_matmul)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 4, 8, 16}, {0, 1, 2, 3}})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul_stream)
    ->ArgsProduct({{2, 3},
                   {1, 4, 8, 16},
                   {static_cast<int>(Isa::avx2), static_cast<int>(Isa::avx512)}})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_pack)->ArgsProduct({{0, 2, 3}, {1, 16}})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
