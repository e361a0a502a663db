// Google Benchmark of the CPU backend's matrix kernels, one thread, on a weight matrix that fits
// in L2 (so the numbers show the compute side of each kernel, not the memory system):
//   specdec_bench_cpu_kernels --benchmark_filter=q8_0
// Arguments: dtype (0 f32, 1 f16, 2 bf16, 3 q8_0), tokens n, Isa (0 portable .. 3 amx).
// Counters: weight bytes streamed per second (what must exceed the DRAM bandwidth per core for
// decode to be memory-bound) and tokens x weights per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/weights.hpp"

namespace {

using namespace specdec;
using cpu::Isa;

constexpr DType dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0};

void BM_matmul(benchmark::State& state) {
  const DType dtype = dtypes[state.range(0)];
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto isa = static_cast<Isa>(state.range(2));
  if (!cpu::isa_supported(isa)) {
    state.SkipWithError("Isa not supported here");
    return;
  }
  const std::size_t rows = 128, cols = 2048;
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
        const std::uint16_t h =
            dtype == DType::f16 ? cpu::f32_to_f16(w[i]) : cpu::f32_to_bf16(w[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    default:
      row_bytes = cols / 32 * 34;
      bytes.resize(rows * row_bytes);
      for (std::size_t r = 0; r < rows; ++r)
        cpu::quantize_row_q8_0(w.data() + r * cols, bytes.data() + r * row_bytes, cols);
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
  state.SetLabel(std::string(dtype_name(dtype)) + " " + cpu::isa_name(isa));
}

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
BENCHMARK(BM_pack)->ArgsProduct({{0, 2, 3}, {1, 16}})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
