#pragma once
// Owning handles for device memory and pinned host memory (host code, both builds).

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "common/check.hpp"

namespace specdec::cuda {

/// `count` values of T in device memory (uninitialised).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::size_t count) : count_(count) {
    if (count == 0) return;
    void* p = nullptr;
    SPECDEC_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    data_ = static_cast<T*>(p);
  }
  DeviceArray(DeviceArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }

  /// Synchronous upload of `count` values (at most size()).
  void upload(const T* values, std::size_t count) {
    SPECDEC_CUDA_CHECK(cudaMemcpy(data_, values, count * sizeof(T), cudaMemcpyHostToDevice));
  }

  [[nodiscard]] T* get() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// `count` values of T in page-locked host memory (asynchronous copies need it).
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(std::size_t count) : count_(count) {
    if (count == 0) return;
    void* p = nullptr;
    SPECDEC_CUDA_CHECK(cudaMallocHost(&p, count * sizeof(T)));
    data_ = static_cast<T*>(p);
  }
  PinnedArray(PinnedArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }

  [[nodiscard]] T* get() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace specdec::cuda
