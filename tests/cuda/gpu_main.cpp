// main() of the GPU variants of the CUDA tests: without a usable device the executable exits with
// 77, which ctest reports as SKIPPED (SKIP_RETURN_CODE), not as passed.
#define CATCH_CONFIG_RUNNER
#include <cuda_runtime.h>

#include <cstdio>

#include "specdec_test.hpp"

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device: the GPU tests are skipped");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
