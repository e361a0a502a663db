// Placeholder kernel source while the backend is being written (keeps both builds non-empty).
#include "common/prelude.cuh"

namespace specdec::cuda {

/// Number of usable CUDA devices (the emulator reports one).
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace specdec::cuda
