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
// Work appended to a step (a StepEpilogue: the sampling kernels of cuda::DeviceSampler) is captured
// with it; its own key joins the step's. Graphs of samplers that no longer exist are never
// replayed (every sampler's keys are unique to it) and are dropped when the cache is full.
//
// The emulator implements capture and replay too (cuda/emu/runtime.cpp), so the tests check that
// replayed steps compute the same logits as launched ones.

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

namespace specdec::cuda {

/// What a captured step baked in: its token count, its number of attention splits and the key of
/// the work appended to it (0: none).
struct GraphKey {
  int tokens = 0;
  int splits = 0;
  std::uint64_t epilogue = 0;
  /// A token tree's step (other attention and rotary kernels): the tree nodes its attention
  /// stages (AttentionParams::tree_nodes); 0 for a plain step.
  int tree_nodes = 0;
  /// The first logits row the step writes (a tree of more than 16 nodes takes several steps).
  int out_row = 0;
  bool operator<(const GraphKey& o) const {
    return std::tie(tokens, splits, epilogue, tree_nodes, out_row) <
           std::tie(o.tokens, o.splits, o.epilogue, o.tree_nodes, o.out_row);
  }
};

class GraphCache {
 public:
  /// Graphs kept at most; a full cache is emptied (re-capturing costs one direct launch each).
  static constexpr std::size_t kMaxGraphs = 256;

  explicit GraphCache(cudaStream_t stream) : stream_(stream) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  /// Runs the work that `record` enqueues on the stream: the first time for `key` by capturing
  /// it into a graph and launching that, afterwards by replaying the graph. Returns true when it
  /// captured.
  bool run(const GraphKey& key, const std::function<void(cudaStream_t)>& record);

  /// Destroys every graph (their baked-in pointers are stale).
  void clear();

  [[nodiscard]] std::size_t size() const noexcept { return graphs_.size(); }

 private:
  cudaStream_t stream_;
  std::map<GraphKey, cudaGraphExec_t> graphs_;
};

}  // namespace specdec::cuda
