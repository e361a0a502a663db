// Tests of the CUDA emulator itself (cuda/emu/): that it executes CUDA's semantics, and that it
// reports the kernel bugs it promises to report. The kernels here are deliberately small and
// some are deliberately wrong.
#include <cuda_runtime.h>

#include <numeric>
#include <string>
#include <vector>

#include "common/prelude.cuh"
#include "support.hpp"

namespace {

using Catch::Matchers::Contains;
using specdec::cuda::launch;
using specdec::emu::Fault;
using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;

// ------------------------------------------------------------------ kernels under test

__global__ void write_indices(unsigned* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block * threads + thread] = block * 1000u + thread;
}

// Reverses each block's slice through shared memory; `with_barrier` false is the classic bug.
__global__ void reverse_through_shared(const int* in, int* out, bool with_barrier) {
  __shared__ int tile[64];
  const unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * blockDim.x + t];
  if (with_barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void early_exit_then_barrier(int* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_after_lane_exit(int* out) {
  if (threadIdx.x == 7) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void full_mask_in_partial_warp(int* out) {
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void shuffle_vs_barrier(int* out) {
  if (threadIdx.x < 16) {  // lanes 16-31 of warp 0 go to the barrier instead
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  }
  __syncthreads();
}

// Every flavour of shuffle with a sub-warp width; results laid out [kind][lane].
__global__ void shuffles(int* out, int width, int param) {
  const int v = 100 + static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.x);
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, param, width);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(param), width);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(param), width);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, param, width);
}

// Votes over the warp of lanes with an odd index below `limit`; a half-warp shuffle in between.
__global__ void votes(unsigned* out, int limit) {
  const int lane = static_cast<int>(threadIdx.x);
  const int pred = lane < limit && lane % 2 == 1;
  out[lane * 4 + 0] = __ballot_sync(0xffffffffu, pred);
  out[lane * 4 + 1] = static_cast<unsigned>(__any_sync(0xffffffffu, pred));
  out[lane * 4 + 2] = static_cast<unsigned>(__all_sync(0xffffffffu, lane < limit));
  // lanes 0-15 and 16-31 shuffle separately, with their own masks
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[lane * 4 + 3] = static_cast<unsigned>(__shfl_sync(half, lane * 10, lane < 16 ? 3 : 19));
}

__global__ void barrier_votes(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  out[t * 3 + 0] = __syncthreads_count(t % 3 == 0);
  out[t * 3 + 1] = __syncthreads_and(t < 1000);
  out[t * 3 + 2] = __syncthreads_or(t == 17);
}

__global__ void read_dynamic_shared(float* out) {
  SPECDEC_DYNAMIC_SHARED(float, smem);
  if (threadIdx.x == 0) smem[0] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = smem[threadIdx.x];  // smem[1...] were never written
}

__global__ void add_one(float* data) { data[threadIdx.x] += 1.0f; }

__global__ void atomic_count(int* counter) { atomicAdd(counter, 1); }

}  // namespace

TEST_CASE("emulator: thread and block indices in 3-D", "[cuda-emu][emulator]") {
  for_each_order([] {
    const dim3 grid(3, 2, 2);
    const dim3 block(4, 3, 2);
    DeviceBuffer<unsigned> out(12 * 24);
    launch(write_indices, grid, block, 0, nullptr, out.get());
    SPECDEC_CUDA_CHECK_LAUNCH("write_indices");
    const auto got = out.download();
    for (unsigned b = 0; b < 12; ++b) {
      for (unsigned t = 0; t < 24; ++t) REQUIRE(got[b * 24 + t] == b * 1000 + t);
    }
  });
}

TEST_CASE("emulator: a missing barrier gives a wrong result in one thread order",
          "[cuda-emu][emulator]") {
  std::vector<int> in(128);
  std::iota(in.begin(), in.end(), 0);
  DeviceBuffer<int> d_in(in);
  DeviceBuffer<int> out(128);
  auto expected = [&](std::size_t i) { return in[i / 64 * 64 + 63 - i % 64]; };

  for_each_order([&] {
    launch(reverse_through_shared, dim3(2), dim3(64), 0, nullptr, d_in.get(), out.get(), true);
    const auto got = out.download();
    for (std::size_t i = 0; i < 128; ++i) REQUIRE(got[i] == expected(i));
  });

  // Without the barrier, reverse order runs thread 63 (which reads tile[0]) before thread 0 has
  // written it: the second block sees the first block's stale tile.
  specdec::emu::set_order(specdec::emu::Order::reverse);
  launch(reverse_through_shared, dim3(2), dim3(64), 0, nullptr, d_in.get(), out.get(), false);
  const auto got = out.download();
  bool all_right = true;
  for (std::size_t i = 0; i < 128; ++i) all_right = all_right && got[i] == expected(i);
  specdec::emu::set_order(specdec::emu::Order::forward);
  CHECK_FALSE(all_right);
}

TEST_CASE("emulator: __syncthreads in divergent code is reported", "[cuda-emu][emulator]") {
  DeviceBuffer<int> out(64);
  REQUIRE_THROWS_WITH(launch(divergent_barrier, dim3(1), dim3(64), 0, nullptr, out.get()),
                      Contains("__syncthreads in divergent code") && Contains("emulator_test.cpp"));
  REQUIRE_THROWS_WITH(launch(early_exit_then_barrier, dim3(1), dim3(64), 0, nullptr, out.get()),
                      Contains("thread 5 has exited"));
  // The emulator recovers: the next launch works.
  for_each_order([&] {
    launch(write_indices, dim3(1), dim3(64), 0, nullptr, reinterpret_cast<unsigned*>(out.get()));
    REQUIRE(out.download()[63] == 63);
  });
}

TEST_CASE("emulator: full-mask shuffles with inactive lanes are reported", "[cuda-emu][emulator]") {
  DeviceBuffer<int> out(64);
  REQUIRE_THROWS_WITH(launch(shuffle_after_lane_exit, dim3(1), dim3(32), 0, nullptr, out.get()),
                      Contains("inactive lanes") && Contains("thread 7 has exited"));
  REQUIRE_THROWS_WITH(launch(full_mask_in_partial_warp, dim3(1), dim3(48), 0, nullptr, out.get()),
                      Contains("does not exist"));
  REQUIRE_THROWS_WITH(launch(shuffle_vs_barrier, dim3(1), dim3(64), 0, nullptr, out.get()),
                      Contains("__syncthreads"));
}

TEST_CASE("emulator: shuffle semantics with sub-warp widths", "[cuda-emu][emulator]") {
  DeviceBuffer<int> out(4 * 32);
  for (int width : {32, 16, 8, 4, 1}) {
    for (int param : {0, 1, 3, 5, 17}) {
      launch(shuffles, dim3(1), dim3(32), 0, nullptr, out.get(), width, param);
      const auto got = out.download();
      for (int lane = 0; lane < 32; ++lane) {
        INFO("width " << width << " param " << param << " lane " << lane);
        const int group = lane / width * width;
        const int idx = group + param % width;
        const int up = lane - group >= param ? lane - param : lane;
        const int down = lane - group + param < width ? lane + param : lane;
        const int x = lane ^ param;
        const int xr = x / width <= lane / width ? x : lane;
        CHECK(got[0 * 32 + lane] == 100 + idx);
        CHECK(got[1 * 32 + lane] == 100 + up);
        CHECK(got[2 * 32 + lane] == 100 + down);
        CHECK(got[3 * 32 + lane] == 100 + xr);
      }
    }
  }
}

TEST_CASE("emulator: ballot, any, all and half-warp masks", "[cuda-emu][emulator]") {
  for_each_order([] {
    for (int limit : {0, 9, 32}) {
      DeviceBuffer<unsigned> out(32 * 4);
      launch(votes, dim3(1), dim3(32), 0, nullptr, out.get(), limit);
      const auto got = out.download();
      unsigned ballot = 0;
      for (int l = 0; l < limit; ++l) ballot |= (l % 2 == 1 ? 1u : 0u) << l;
      for (int lane = 0; lane < 32; ++lane) {
        CHECK(got[lane * 4 + 0] == ballot);
        CHECK(got[lane * 4 + 1] == (ballot != 0 ? 1u : 0u));
        CHECK(got[lane * 4 + 2] == (limit == 32 ? 1u : 0u));
        CHECK(got[lane * 4 + 3] == (lane < 16 ? 30u : 190u));
      }
    }
  });
}

TEST_CASE("emulator: __syncthreads_count / _and / _or", "[cuda-emu][emulator]") {
  for_each_order([] {
    DeviceBuffer<int> out(96 * 3);
    launch(barrier_votes, dim3(1), dim3(96), 0, nullptr, out.get());
    const auto got = out.download();
    for (int t = 0; t < 96; ++t) {
      CHECK(got[t * 3 + 0] == 32);
      CHECK(got[t * 3 + 1] == 1);
      CHECK(got[t * 3 + 2] == 1);
    }
  });
}

TEST_CASE("emulator: dynamic shared memory is poisoned with NaN", "[cuda-emu][emulator]") {
  DeviceBuffer<float> out(32);
  launch(read_dynamic_shared, dim3(1), dim3(32), 32 * sizeof(float), nullptr, out.get());
  const auto got = out.download();
  CHECK(got[0] == 1.0f);
  for (int i = 1; i < 32; ++i) CHECK(std::isnan(got[i]));
}

TEST_CASE("emulator: launch configuration errors", "[cuda-emu][emulator]") {
  DeviceBuffer<float> data(32);
  (void)cudaGetLastError();
  launch(add_one, dim3(1), dim3(2048), 0, nullptr, data.get());
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading clears it
  launch(add_one, dim3(1), dim3(32), 64 * 1024, nullptr, data.get());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  // Opting in raises the limit up to the sm_86 maximum (99 KiB), not beyond.
  CHECK(specdec::cuda::set_max_dynamic_shared(add_one, 64 * 1024) == cudaSuccess);
  launch(add_one, dim3(1), dim3(32), 64 * 1024, nullptr, data.get());
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(specdec::cuda::set_max_dynamic_shared(add_one, 200 * 1024) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("emulator: host pointers and wrong copy directions are reported",
          "[cuda-emu][emulator]") {
  std::vector<float> host(32, 0.0f);
  REQUIRE_THROWS_WITH(launch(add_one, dim3(1), dim3(32), 0, nullptr, host.data()),
                      Contains("not allocated with cudaMalloc"));
  DeviceBuffer<float> dev(32);
  CHECK(cudaMemcpy(host.data(), dev.get(), 128, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.get(), host.data(), 129, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dev.get(), host.data(), 128, cudaMemcpyHostToDevice) == cudaSuccess);
  (void)cudaGetLastError();
  // Fresh device memory reads as NaN.
  DeviceBuffer<float> fresh(4);
  for (float v : fresh.download()) CHECK(std::isnan(v));
}

TEST_CASE("emulator: graphs record launches and copies and replay them", "[cuda-emu][emulator]") {
  cudaStream_t stream = nullptr;
  SPECDEC_CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceBuffer<float> data(32);
  data.fill_bytes(0);
  float* staging = nullptr;
  SPECDEC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging), 32 * sizeof(float)));
  for (int i = 0; i < 32; ++i) staging[i] = 10.0f;

  cudaGraph_t graph = nullptr;
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  SPECDEC_CUDA_CHECK(
      cudaMemcpyAsync(data.get(), staging, 32 * sizeof(float), cudaMemcpyHostToDevice, stream));
  launch(add_one, dim3(1), dim3(32), 0, stream, data.get());
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  // Nothing ran during the capture.
  for (float v : data.download()) REQUIRE(v == 0.0f);

  cudaGraphExec_t exec = nullptr;
  SPECDEC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 32; ++i) staging[i] = 5.0f;  // the copy reads the staging buffer at replay
  SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (float v : data.download()) REQUIRE(v == 6.0f);

  // A synchronous call during capture invalidates it.
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemset(data.get(), 0, 4) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t broken = nullptr;
  CHECK(cudaStreamEndCapture(stream, &broken) == cudaErrorStreamCaptureInvalidated);
  CHECK(broken == nullptr);
  (void)cudaGetLastError();

  SPECDEC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SPECDEC_CUDA_CHECK(cudaGraphDestroy(graph));
  SPECDEC_CUDA_CHECK(cudaFreeHost(staging));
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("emulator: atomics and fiber switches", "[cuda-emu][emulator][fibers]") {
  for_each_order([] {
    DeviceBuffer<int> counter(1);
    counter.fill_bytes(0);
    launch(atomic_count, dim3(5), dim3(64), 0, nullptr, counter.get());
    REQUIRE(counter.download()[0] == 320);
  });
  // Each thread is resumed once at its start and once after each of its 4 shuffles.
  DeviceBuffer<int> out(4 * 32);
  const auto before = specdec::emu::stats();
  launch(shuffles, dim3(1), dim3(32), 0, nullptr, out.get(), 32, 1);
  const auto after = specdec::emu::stats();
  CHECK(after.launches == before.launches + 1);
  CHECK(after.fiber_switches - before.fiber_switches == 32 * 5);  // start + 4 shuffles
}
