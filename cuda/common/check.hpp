#pragma once
// Error checking for host code that calls the CUDA runtime: every failure becomes a
// specdec::Error naming the call, the file and line, and the runtime's message.

#include <cuda_runtime.h>

#include <string>

#include "specdec/common.hpp"

namespace specdec::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ") in " + what + " at " + file + ":" +
              std::to_string(line));
}

inline void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, what, file, line);
}

}  // namespace specdec::cuda::detail

/// Throws specdec::Error when the runtime call fails.
#define SPECDEC_CUDA_CHECK(call) ::specdec::cuda::detail::check((call), #call, __FILE__, __LINE__)

/// After a launch: throws when the launch configuration was rejected.
#define SPECDEC_CUDA_CHECK_LAUNCH(what) \
  ::specdec::cuda::detail::check(cudaGetLastError(), what, __FILE__, __LINE__)
