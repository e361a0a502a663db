// SwiGLU (see swiglu.hpp): elementwise over n * ffn values, a grid-stride loop. expf is the
// precise exponential (the CPU backend uses a correctly-rounded-to-1-ulp exp as well).
#include <algorithm>

#include "common/check.hpp"
#include "common/prelude.cuh"
#include "kernels/swiglu.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    swiglu_kernel(const float* gate_up, int n, int ffn, float* out) {
  const std::size_t total = static_cast<std::size_t>(n) * ffn;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += stride) {
    const std::size_t t = i / ffn;
    const std::size_t c = i % ffn;
    const float g = gate_up[t * 2 * ffn + c];
    const float u = gate_up[t * 2 * ffn + ffn + c];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

}  // namespace

void swiglu(const float* gate_up, int n, int ffn, float* out, cudaStream_t stream) {
  if (n <= 0 || ffn <= 0) return;
  const std::size_t total = static_cast<std::size_t>(n) * ffn;
  const auto blocks =
      static_cast<unsigned>(std::min<std::size_t>(ceil_div<std::size_t>(total, kThreads), 4096));
  launch(swiglu_kernel, dim3(blocks), dim3(kThreads), 0, stream, gate_up, n, ffn, out);
  SPECDEC_CUDA_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace specdec::cuda::kernels
