// What the CUDA runtime says about the devices (device_count, device_count_error).
#include "common/prelude.cuh"

#include <string>

namespace specdec::cuda {

// Declared in specdec/cuda/transformer.hpp (not included: kernel sources include CUDA code only).

/// Number of usable CUDA devices (the emulator reports one).
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string device_count_error() {
  int n = 0;
  const cudaError_t error = cudaGetDeviceCount(&n);
  if (error == cudaSuccess) return {};
  (void)cudaGetLastError();
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

}  // namespace specdec::cuda
