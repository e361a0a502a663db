// Tree path compaction in the KV cache (see kv_path.hpp). Grid: (layers * KV heads, 2: K and V);
// a block moves its head's rows one depth after another. Moving node[k] to slot k in increasing
// k never overwrites a row still to be read (node[j] >= j > k for the later ones), but slot k may
// be the row an earlier depth read, so the depths are ordered by a barrier, not run in parallel.
#include <string>

#include "common/check.hpp"
#include "common/prelude.cuh"
#include "kernels/kv_path.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    kv_keep_path_kernel(void* k_cache, void* v_cache, int capacity, int row_bytes, int start,
                        KvPath path) {
  auto* cache = static_cast<uint4*>(blockIdx.y == 0 ? k_cache : v_cache);
  const int words = row_bytes / 16;  // uint4 per row
  uint4* head = cache + static_cast<std::size_t>(blockIdx.x) * capacity * words;
  for (int k = 0; k < path.count; ++k) {
    if (path.node[k] == k) continue;  // uniform over the block
    const uint4* from = head + static_cast<std::size_t>(start + path.node[k]) * words;
    uint4* to = head + static_cast<std::size_t>(start + k) * words;
    for (int w = static_cast<int>(threadIdx.x); w < words; w += kThreads) to[w] = from[w];
    __syncthreads();  // slot start + k is written before a later depth may read it
  }
}

}  // namespace

void kv_keep_path(void* k_cache, void* v_cache, int blocks, int capacity, int row_bytes, int start,
                  const KvPath& path, cudaStream_t stream) {
  if (path.count <= 0 || blocks <= 0) return;
  if (path.count > kMaxTreeNodes)
    throw Error("kv_keep_path: a path of more than " + std::to_string(kMaxTreeNodes) + " nodes");
  if (row_bytes <= 0 || row_bytes % 16 != 0)
    throw Error("kv_keep_path: a KV row must be a positive multiple of 16 bytes");
  launch(kv_keep_path_kernel, dim3(static_cast<unsigned>(blocks), 2), dim3(kThreads), 0, stream,
         k_cache, v_cache, capacity, row_bytes, start, path);
  SPECDEC_CUDA_CHECK_LAUNCH("kv_keep_path_kernel");
}

}  // namespace specdec::cuda::kernels
