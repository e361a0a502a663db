#pragma once
// CUDA graphs for the repeated steps (decode, verify).
//
// A step of n <= 16 tokens launches about 10 kernels per layer: at a few microseconds of launch
// overhead each, a 22-layer model would spend ~1 ms per step launching, about the time the GPU
// needs to read the weights. So each step shape is captured once into a CUDA graph and replayed
// with one launch. A replay repeats the kernels with the arguments fixed at capture, so
// everything that changes between steps lives in device memory at fixed addresses: the token ids
// and the start position are copied there before each replay (outside the graph), and kernels
// read them. The shape key names everything else that the capture baked in (token count, number
// of attention splits); buffers that move (a reallocated logits buffer) invalidate all graphs.
//
// The emulator implements capture and replay too (cuda/emu/runtime.cpp), so the tests check that
// replayed steps compute the same logits as launched ones.

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

namespace specdec::cuda {

class GraphCache {
 public:
  explicit GraphCache(cudaStream_t stream) : stream_(stream) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  /// Runs the work that `record` enqueues on the stream: the first time for `key` by capturing
  /// it into a graph and launching that, afterwards by replaying the graph. Returns true when it
  /// captured.
  bool run(std::uint64_t key, const std::function<void(cudaStream_t)>& record);

  /// Destroys every graph (their baked-in pointers are stale).
  void clear();

  [[nodiscard]] std::size_t size() const noexcept { return graphs_.size(); }

 private:
  cudaStream_t stream_;
  std::unordered_map<std::uint64_t, cudaGraphExec_t> graphs_;
};

}  // namespace specdec::cuda
