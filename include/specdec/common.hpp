#pragma once
// Vocabulary shared by every layer: the token type, the error type, and the host/device marker.
// Standard library only: the sampling core and the CUDA kernels include this.

#include <cstdint>
#include <stdexcept>
#include <string>

// SPECDEC_HD marks functions that the CUDA kernels share with the host code. It is empty in
// plain C++ and in the CUDA emulation build (where <cuda_runtime.h> also makes the CUDA
// qualifiers no-ops), and expands to __host__ __device__ only under nvcc.
#if defined(__CUDACC__)
#define SPECDEC_HD __host__ __device__
#else
#define SPECDEC_HD
#endif

namespace specdec {

/// A token id. Signed 32-bit as in llama.cpp and FlashInfer, so that -1 can mean "none".
using token_t = std::int32_t;

/// Every error specdec reports: bad files, bad shapes, bad flags, NaN logits, context overflow.
/// The message names the problem (and the file, where there is one).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace specdec
