// f32 -> f16 / bf16 conversion (see convert.hpp): a grid-stride elementwise loop.
#include <algorithm>

#include "common/check.hpp"
#include "common/convert.cuh"
#include "kernels/convert.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(const float* in, std::size_t count, T* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += stride) {
    out[i] = from_float<T>(in[i]);
  }
}

}  // namespace

void convert_f32(const float* in, std::size_t count, DType type, void* out, cudaStream_t stream) {
  if (!is_16bit(type)) throw Error("convert_f32: the output type must be F16 or BF16");
  if (count == 0) return;
  const auto blocks =
      static_cast<unsigned>(std::min<std::size_t>(ceil_div<std::size_t>(count, kThreads), 4096));
  if (type == DType::f16) {
    launch(convert_kernel<__half>, dim3(blocks), dim3(kThreads), 0, stream, in, count,
           static_cast<__half*>(out));
  } else {
    launch(convert_kernel<__nv_bfloat16>, dim3(blocks), dim3(kThreads), 0, stream, in, count,
           static_cast<__nv_bfloat16*>(out));
  }
  SPECDEC_CUDA_CHECK_LAUNCH("convert_kernel");
}

}  // namespace specdec::cuda::kernels
