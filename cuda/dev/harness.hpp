#pragma once
// The kernel development harness (docs/cuda.md, section 9), in the manner of llm.c's dev/cuda:
// one program per kernel (skinny_gemm.cpp, attention.cpp, verify.cpp) that runs every variant of
// the kernel on a list of shapes, checks each result against its CPU reference and, on a GPU,
// times it with CUDA events and prints the achieved bandwidth next to the device's peak.
//
// Each program builds twice, like the tests: against the emulator (cuda_emu_dev_*: small shapes,
// checks only, run by ctest with the label cuda-emu) and against the nvcc library (cuda_dev_*:
// the real shapes, checks and timings; `--check` skips the timings). A program exits with 1 when a
// check fails, and the nvcc build with 77 when there is no CUDA device.
//
// Bandwidth: bytes / time, where `bytes` is what the kernel must move at least (weights, KV,
// inputs and outputs; stated per program), and the peak is 2 x memory clock x bus width (the
// device's attributes; DDR: two transfers per clock).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/check.hpp"

namespace specdec::cuda::dev {

#if defined(SPECDEC_CUDA_EMULATION)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

/// `count` values of T in device memory.
template <class T>
class Buffer {
 public:
  explicit Buffer(std::size_t count) : count_(count) {
    void* p = nullptr;
    SPECDEC_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(count, 1) * sizeof(T)));
    data_ = static_cast<T*>(p);
  }
  explicit Buffer(const std::vector<T>& values) : Buffer(values.size()) {
    SPECDEC_CUDA_CHECK(
        cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { cudaFree(data_); }

  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(count_);
    SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());
    SPECDEC_CUDA_CHECK(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  [[nodiscard]] T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t count_;
};

/// Deterministic pseudo-random floats in [lo, hi).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// The device's name and peak memory bandwidth in GB/s (0 under the emulator).
struct DeviceInfo {
  std::string name;
  double peak_gbs = 0;
};

inline DeviceInfo device_info() {
  if constexpr (kEmulated) {
    return {"emulated device (checks only, no timings)", 0.0};
  } else {
    int device = 0;
    SPECDEC_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    SPECDEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    int clock_khz = 0;
    int bus_bits = 0;
    SPECDEC_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
    SPECDEC_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    return {prop.name, 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9};
  }
}

/// Mean milliseconds of one `launch()` over `iters` calls after `warmup` calls, by CUDA events
/// on the default stream (GPU build only: the emulator has no clock worth reading).
template <class Launch>
double time_ms(Launch&& launch, int warmup = 3, int iters = 20) {
#if defined(SPECDEC_CUDA_EMULATION)
  (void)launch;
  (void)warmup;
  (void)iters;
  return 0.0;
#else
  for (int i = 0; i < warmup; ++i) launch();
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  SPECDEC_CUDA_CHECK(cudaEventCreate(&start));
  SPECDEC_CUDA_CHECK(cudaEventCreate(&stop));
  SPECDEC_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) launch();
  SPECDEC_CUDA_CHECK(cudaEventRecord(stop));
  SPECDEC_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SPECDEC_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) / iters;
#endif
}

/// max |a - e| / max |e|: the error relative to the reference's scale.
inline double scaled_error(std::span<const float> actual, std::span<const float> expected) {
  double scale = 1e-30;
  double diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(expected[i])));
    diff = std::max(diff, std::abs(static_cast<double>(actual[i]) - expected[i]));
  }
  return diff / scale;
}

/// "max err 1.23e-07".
inline std::string error_text(double error) {
  char text[32];
  std::snprintf(text, sizeof text, "max err %.2e", error);
  return text;
}

/// Command line, device, result table and exit code of one harness program.
class Harness {
 public:
  Harness(int argc, char** argv, const char* title) {
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--check") == 0) {
        check_only_ = true;
      } else {
        std::fprintf(stderr, "usage: %s [--check]   (--check: no timings)\n", argv[0]);
        std::exit(2);
      }
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      std::puts("no CUDA device: nothing to run");
      std::exit(77);
    }
    device_ = device_info();
    std::printf("%s on %s", title, device_.name.c_str());
    if (device_.peak_gbs > 0) std::printf(", peak memory bandwidth %.0f GB/s", device_.peak_gbs);
    std::printf("\n");
  }

  /// True when this run times the kernels (a GPU, without --check).
  [[nodiscard]] bool timing() const { return !kEmulated && !check_only_; }
  [[nodiscard]] const DeviceInfo& device() const { return device_; }

  /// Prints one result row: `label`, the check (error and bound, or a decision count), and on a
  /// GPU the time, the bandwidth for `bytes` and its fraction of the peak.
  void row(const std::string& label, bool ok, const std::string& check, double ms, double bytes) {
    failures_ += ok ? 0 : 1;
    std::printf("%-52s %-4s %-24s", label.c_str(), ok ? "ok" : "FAIL", check.c_str());
    if (ms > 0) {
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf(" %9.2f us %8.1f GB/s %5.1f %%", ms * 1e3, gbs,
                  device_.peak_gbs > 0 ? 100.0 * gbs / device_.peak_gbs : 0.0);
    }
    std::printf("\n");
  }

  [[nodiscard]] int finish() const {
    std::printf("%d check(s) failed\n", failures_);
    return failures_ == 0 ? 0 : 1;
  }

 private:
  bool check_only_ = false;
  DeviceInfo device_;
  int failures_ = 0;
};

}  // namespace specdec::cuda::dev
