// GraphCache (see graph.hpp).
#include "host/graph.hpp"

#include "common/check.hpp"

namespace specdec::cuda {

GraphCache::~GraphCache() { clear(); }

void GraphCache::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

bool GraphCache::run(const GraphKey& key, const std::function<void(cudaStream_t)>& record) {
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    SPECDEC_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    return false;
  }
  if (graphs_.size() >= kMaxGraphs) clear();
  // Thread-local mode: only this thread's unsafe calls (synchronous copies, ...) break the capture.
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    record(stream_);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream_, &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  SPECDEC_CUDA_CHECK(status);
  graphs_.emplace(key, exec);
  SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  return true;
}

}  // namespace specdec::cuda
