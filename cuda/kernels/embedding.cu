// Embedding gather (see embedding.hpp). One block per token; each thread widens eight 16-bit
// values per 128-bit load when the row length allows it. Memory-bound and tiny (n * dim values).
#include "common/check.hpp"
#include "common/convert.cuh"
#include "kernels/embedding.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kThreads = 128;

template <class T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const T* table, int vocab, int dim, const token_t* tokens, float* out) {
  const int t = static_cast<int>(blockIdx.x);
  const token_t id = tokens[t];
  float* dst = out + static_cast<std::size_t>(t) * dim;
  if (id < 0 || id >= vocab) {  // uniform for the block: every thread returns
    for (int i = static_cast<int>(threadIdx.x); i < dim; i += kThreads) dst[i] = NAN;
    return;
  }
  const T* src = table + static_cast<std::size_t>(id) * dim;
  if constexpr (kVector) {
    const auto* src8 = reinterpret_cast<const uint4*>(src);
    for (int c = static_cast<int>(threadIdx.x); c < dim / 8; c += kThreads) {
      float v[8];
      unpack8(src8[c], v, T{});
      auto* dst4 = reinterpret_cast<float4*>(dst + 8 * c);
      dst4[0] = make_float4(v[0], v[1], v[2], v[3]);
      dst4[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < dim; i += kThreads) dst[i] = to_float(src[i]);
  }
}

template <class T>
void run(const void* table, int vocab, int dim, const token_t* tokens, int n, float* out,
         cudaStream_t stream) {
  const bool vector = dim % 8 == 0;
  const auto* typed = static_cast<const T*>(table);
  if (vector) {
    launch(embedding_kernel<T, true>, dim3(static_cast<unsigned>(n)), dim3(kThreads), 0, stream,
           typed, vocab, dim, tokens, out);
  } else {
    launch(embedding_kernel<T, false>, dim3(static_cast<unsigned>(n)), dim3(kThreads), 0, stream,
           typed, vocab, dim, tokens, out);
  }
}

}  // namespace

void embedding_gather(WeightType type, const void* table, int vocab, int dim, const token_t* tokens,
                      int n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  if (type == WeightType::f16) {
    run<__half>(table, vocab, dim, tokens, n, out, stream);
  } else {
    run<__nv_bfloat16>(table, vocab, dim, tokens, n, out, stream);
  }
  SPECDEC_CUDA_CHECK_LAUNCH("embedding_kernel");
}

}  // namespace specdec::cuda::kernels
