// Links the installed specdec::cuda (built only when the package has it). Its public header
// includes no CUDA header: the backend keeps them behind a pimpl.
#include <cstdio>

#include <specdec/cuda/transformer.hpp>

int main() {
  std::printf("CUDA devices visible: %d\n", specdec::cuda::device_count());
  return 0;
}
