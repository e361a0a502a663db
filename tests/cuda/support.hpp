#pragma once
// Helpers shared by the CUDA tests. The same test sources build twice: against the emulator
// (label cuda-emu, SPECDEC_CUDA_EMULATION defined) and against the nvcc library on a real GPU
// (label gpu, skipped when no device is present).

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "specdec_test.hpp"

#if defined(SPECDEC_CUDA_EMULATION)
#include "emu/emu.hpp"
#endif

namespace specdec::test {

/// Device memory for `count` values of T, every byte 0xFF (NaN as f32, f16 and bf16): what a
/// kernel must not touch or read stays recognisable. (The emulator's cudaMalloc fills with 0xFF
/// itself; a GPU's leaves whatever was there, so the fill is explicit.)
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    void* p = nullptr;
    const std::size_t bytes = std::max<std::size_t>(count, 1) * sizeof(T);
    SPECDEC_CUDA_CHECK(cudaMalloc(&p, bytes));
    data_ = static_cast<T*>(p);
    SPECDEC_CUDA_CHECK(cudaMemset(p, 0xFF, bytes));
  }
  explicit DeviceBuffer(std::span<const T> values) : DeviceBuffer(values.size()) { upload(values); }
  DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(std::span<const T>(values)) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(o.count_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  void upload(std::span<const T> values) {
    REQUIRE(values.size() <= count_);
    SPECDEC_CUDA_CHECK(
        cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(count_);
    if (count_ > 0) {
      SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());
      SPECDEC_CUDA_CHECK(cudaMemcpy(out.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return out;
  }
  void fill_bytes(int byte) { SPECDEC_CUDA_CHECK(cudaMemset(data_, byte, count_ * sizeof(T))); }

  [[nodiscard]] T* get() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// Runs `body` once per emulated thread order (forward, then reverse), or once on a GPU.
/// A missing barrier typically passes in one order and fails in the other.
template <class Body>
void for_each_order(Body&& body) {
#if defined(SPECDEC_CUDA_EMULATION)
  for (auto order : {emu::Order::forward, emu::Order::reverse}) {
    emu::set_order(order);
    INFO("emulated thread order: " << (order == emu::Order::forward ? "forward" : "reverse"));
    body();
  }
  emu::set_order(emu::Order::forward);
#else
  body();
#endif
}

/// Deterministic pseudo-random floats in [lo, hi).
inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

/// max_i |a_i - b_i| / max(max_i |b_i|, tiny): the error relative to the reference's scale.
inline double relative_error(std::span<const float> actual, std::span<const float> expected) {
  REQUIRE(actual.size() == expected.size());
  double scale = 1e-30;
  double diff = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    scale = std::max(scale, std::abs(double{expected[i]}));
    diff = std::max(diff, std::abs(double{actual[i]} - double{expected[i]}));
  }
  return diff / scale;
}

/// Every element within `abs + rel * |expected|`; reports the first offender.
inline void require_close(std::span<const float> actual, std::span<const float> expected,
                          double rel, double abs) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i];
    const double a = actual[i];
    if (!(std::abs(a - e) <= abs + rel * std::abs(e))) {
      INFO("index " << i << ": actual " << a << ", expected " << e);
      REQUIRE(std::abs(a - e) <= abs + rel * std::abs(e));
    }
  }
}

}  // namespace specdec::test
