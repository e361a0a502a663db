// Blas for the emulation build: the cublasGemmEx contract (16-bit inputs, f32 accumulation and
// output) as a CPU loop, enqueued on the stream like any emulated work.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <vector>

#include "emu/emu.hpp"
#include "emu/runtime_internal.hpp"
#include "host/blas.hpp"

namespace specdec::cuda {

namespace {

template <class T>
void gemm(const T* w, const T* x, float* y, int n, int out, int in, int ldy) {
  std::vector<float> xf(static_cast<std::size_t>(n) * in);
  for (std::size_t i = 0; i < xf.size(); ++i) xf[i] = static_cast<float>(x[i]);
  std::vector<float> row(static_cast<std::size_t>(in));
  for (int r = 0; r < out; ++r) {
    for (int k = 0; k < in; ++k)
      row[k] = static_cast<float>(w[static_cast<std::size_t>(r) * in + k]);
    for (int t = 0; t < n; ++t) {
      const float* xt = xf.data() + static_cast<std::size_t>(t) * in;
      float s = 0.0f;
      for (int k = 0; k < in; ++k) s += row[k] * xt[k];
      y[static_cast<std::size_t>(t) * ldy + r] = s;
    }
  }
}

}  // namespace

Blas::Blas() = default;
Blas::~Blas() = default;

void Blas::gemm_xwT(DType type, const void* w, const void* x, float* y, int n, int out, int in,
                    int ldy, cudaStream_t stream) {
  namespace detail = emu::detail;
  if (!is_16bit(type) || ldy < out) {
    detail::set_last_error(cudaErrorInvalidValue);  // as cuBLAS rejects them
    return;
  }
  const std::size_t elems = static_cast<std::size_t>(out) * in;
  const std::size_t y_elems = static_cast<std::size_t>(n - 1) * ldy + out;
  if (!detail::is_registered(w, elems * 2) ||
      !detail::is_registered(x, static_cast<std::size_t>(n) * in * 2) ||
      !detail::is_registered(y, y_elems * sizeof(float))) {
    throw emu::Fault("CUDA emulator: Blas::gemm_xwT given memory that is not device memory");
  }
  const cudaError_t status = detail::enqueue(stream, [=] {
    if (type == DType::f16) {
      gemm(static_cast<const __half*>(w), static_cast<const __half*>(x), y, n, out, in, ldy);
    } else {
      gemm(static_cast<const __nv_bfloat16*>(w), static_cast<const __nv_bfloat16*>(x), y, n, out,
           in, ldy);
    }
  });
  if (status != cudaSuccess) detail::set_last_error(status);
}

}  // namespace specdec::cuda
