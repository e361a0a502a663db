#pragma once
// What the emulator's scheduler needs from its runtime (runtime.cpp): the launch error, stream
// capture, memory registration and per-kernel attributes.

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace specdec::emu::detail {

/// Sets the sticky per-thread error returned by cudaGetLastError / cudaPeekAtLastError.
void set_last_error(cudaError_t error) noexcept;

/// Runs `work` now, or records it when `stream` is being captured into a graph. Work submitted
/// to the legacy default stream while a capture is active invalidates the capture (as on a GPU).
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

/// The dynamic shared memory a kernel may use (cudaFuncAttributeMaxDynamicSharedMemorySize).
std::size_t max_dynamic_shared(const void* kernel) noexcept;

/// Whether [p, p + bytes) lies inside one cudaMalloc / cudaMallocHost allocation (bytes may be 0:
/// then p may also be one past the end).
bool is_registered(const void* p, std::size_t bytes) noexcept;

}  // namespace specdec::emu::detail
