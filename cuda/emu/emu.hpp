#pragma once
// The CUDA emulator: what a kernel sees when its .cu source is compiled as host C++.
//
// The project's machines have the CUDA toolkit but no GPU, so every kernel is also compiled with
// g++ against this header and executed on the CPU by the tests. The model of execution:
//   - a launch runs its blocks one after another (forward or reverse block order);
//   - the threads of a block are cooperatively scheduled fibers (see scheduler.cpp). A thread
//     runs until it reaches a block barrier, a warp collective (shuffle, ballot, __syncwarp) or
//     its end; when every thread of the block is blocked the scheduler completes what can be
//     completed (a warp collective whose whole mask has arrived, a __syncthreads that every
//     thread has reached) and resumes the threads in forward or reverse thread order.
//   - mistakes that would hang or silently corrupt on a GPU are reported as specdec::emu::Fault
//     (thrown from the launch): __syncthreads reached by only part of the block or at different
//     places, a shuffle whose mask names an exited / non-existent / elsewhere-waiting lane,
//     mismatched collectives, a kernel argument that points to unregistered (host) memory.
//   - __shared__ variables become `static thread_local`: one copy per OS thread, which is one
//     copy per block because a block's fibers all run on the launching thread and blocks run one
//     at a time. Dynamic shared memory (SPECDEC_DYNAMIC_SHARED) is a per-launch buffer filled
//     with 0xFF bytes (NaN as f32/f16/bf16, -1 as an integer) before every block.
//   - device memory is host heap memory (cudaMalloc fills it with 0xFF as well), so the ASan
//     build catches out-of-bounds accesses of kernels.
// Running every test in both thread orders turns most missing barriers into wrong results: with
// forward order thread 0 always writes before thread 1 reads, with reverse order never.
//
// What the emulator cannot show: races between warps that a GPU would interleave differently,
// memory ordering and atomics contention, coalescing, bank conflicts, occupancy, registers, and
// device-vs-host math differences. Those stay unverified until run on a GPU (docs/cuda.md).
//
// Kernels do not include this header directly: they include cuda/common/prelude.cuh, which
// includes either the real CUDA headers (nvcc) or this one (SPECDEC_CUDA_EMULATION).

#if defined(__CUDACC__)
#error "cuda/emu/emu.hpp is the host emulation of CUDA; nvcc builds must not include it"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#if !defined(__clang__)
#include <source_location>
#endif
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace specdec::emu {

/// The order in which the scheduler resumes threads (and runs blocks).
enum class Order { forward, reverse };

/// Process-wide; tests run each case once per order (see tests/cuda/support.hpp).
void set_order(Order order) noexcept;
Order order() noexcept;

/// A kernel bug the emulator detected (divergent barrier, bad shuffle mask, host pointer...).
/// The message names the kernel's source location and the threads involved.
class Fault : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// The emulated device's limits (the smallest of the targeted GPUs, sm_86/sm_89).
inline constexpr std::size_t kDefaultDynamicShared = 48 * 1024;  ///< without the opt-in attribute
inline constexpr std::size_t kMaxDynamicShared = 99 * 1024;      ///< opt-in limit on sm_86/sm_89
inline constexpr int kMultiProcessors = 8;                       ///< reported SM count

/// Statistics of the calling OS thread (for tests and for keeping emulated runs cheap).
struct Stats {
  std::uint64_t launches = 0;
  std::uint64_t blocks = 0;
  std::uint64_t fiber_switches = 0;
};
Stats stats() noexcept;

namespace detail {

/// What a warp collective or a block barrier is: the scheduler completes one of these when every
/// participant has arrived.
enum class Op : std::uint8_t {
  none,
  syncthreads,
  syncthreads_count,
  syncthreads_and,
  syncthreads_or,
  syncwarp,
  shfl_idx,
  shfl_up,
  shfl_down,
  shfl_xor,
  ballot,
  all,
  any,
};
const char* op_name(Op op) noexcept;

/// Where a collective was called, as std::source_location says it. clang reads it from its
/// builtins, because clang 14 (the CI's clang-tidy) cannot compile libstdc++'s <source_location>;
/// GCC has no __builtin_COLUMN and takes std::source_location. As a default argument, current()
/// records the caller's position.
struct SourceSite {
  const char* file = "";
  const char* function = "";
  unsigned line = 0;
  unsigned column = 0;
#if defined(__clang__)
  static constexpr SourceSite current(const char* file = __builtin_FILE(),
                                      const char* function = __builtin_FUNCTION(),
                                      unsigned line = __builtin_LINE(),
                                      unsigned column = __builtin_COLUMN()) noexcept {
    return SourceSite{file, function, line, column};
  }
#else
  static constexpr SourceSite current(
      std::source_location site = std::source_location::current()) noexcept {
    return SourceSite{site.file_name(), site.function_name(), site.line(), site.column()};
  }
#endif
};

constexpr bool is_block_op(Op op) noexcept {
  return op == Op::syncthreads || op == Op::syncthreads_count || op == Op::syncthreads_and ||
         op == Op::syncthreads_or;
}

/// One emulated CUDA thread's visible state. The scheduler owns the fiber around it.
struct Thread {
  uint3 thread_idx{};
  unsigned linear = 0;  ///< threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
  // The pending collective (filled by the device functions below, read by the scheduler).
  Op op = Op::none;
  unsigned mask = 0;
  int param = 0;  ///< source lane / delta / lane mask
  int width = 32;
  int predicate = 0;
  SourceSite site{};
  alignas(16) unsigned char value[8]{};
  std::size_t value_size = 0;
  // The collective's result for this thread.
  alignas(16) unsigned char result[8]{};
  unsigned result_word = 0;
};

struct Block {
  uint3 block_idx{};
  dim3 block_dim{};
  dim3 grid_dim{};
  unsigned char* dynamic_shared = nullptr;
};

// The running thread and block of this OS thread (set by the scheduler around each resume).
inline thread_local Thread* tl_thread = nullptr;
inline thread_local const Block* tl_block = nullptr;

inline Thread& this_thread() noexcept { return *tl_thread; }
inline const Block& this_block() noexcept { return *tl_block; }

/// Suspends the calling fiber until the scheduler has completed its pending collective.
void wait_collective();

inline Thread& begin(Op op, unsigned mask, const SourceSite& site) {
  Thread& t = this_thread();
  t.op = op;
  t.mask = mask;
  t.site = site;
  t.param = 0;
  t.width = 32;
  t.predicate = 0;
  t.value_size = 0;
  return t;
}

template <class T>
T shuffle(Op op, unsigned mask, T var, int param, int width, const SourceSite& site) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move 4- or 8-byte values (or smaller)");
  Thread& t = begin(op, mask, site);
  std::memcpy(t.value, &var, sizeof(T));
  t.value_size = sizeof(T);
  t.param = param;
  t.width = width;
  wait_collective();
  T out = var;
  std::memcpy(&out, t.result, sizeof(T));
  return out;
}

inline unsigned vote(Op op, unsigned mask, int predicate, const SourceSite& site) {
  Thread& t = begin(op, mask, site);
  t.predicate = predicate;
  wait_collective();
  return t.result_word;
}

/// A recorded kernel launch: the body runs once per thread (the arguments were copied at launch,
/// as CUDA copies kernel parameters).
struct Launch {
  const void* kernel = nullptr;
  dim3 grid{}, block{};
  std::size_t dynamic_shared = 0;
  cudaStream_t stream = nullptr;
  std::function<void()> body;
};

/// Runs (or, when the stream is being captured into a graph, records) a launch. Invalid
/// configurations set the sticky launch error (cudaGetLastError), as the real runtime does.
void submit(Launch launch);

/// Throws Fault when `p` is neither null nor inside memory from cudaMalloc / cudaMallocHost.
void check_kernel_pointer(const void* p, std::size_t argument, const void* kernel);

template <class T>
void check_argument(const T& value, std::size_t index, const void* kernel) {
  if constexpr (std::is_pointer_v<T>) check_kernel_pointer(value, index, kernel);
}

}  // namespace detail

/// The emulated `kernel<<<grid, block, smem, stream>>>(args...)`.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_shared,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  const void* id = reinterpret_cast<const void*>(kernel);
  auto bound = std::make_shared<std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
  std::apply(
      [&](const auto&... a) {
        std::size_t i = 0;
        (detail::check_argument(a, i++, id), ...);
      },
      *bound);
  detail::submit(detail::Launch{id, grid, block, dynamic_shared, stream,
                                [kernel, bound] { std::apply(kernel, *bound); }});
}

}  // namespace specdec::emu

// ------------------------------------------------------------------ built-in variables
#define threadIdx (::specdec::emu::detail::this_thread().thread_idx)
#define blockIdx (::specdec::emu::detail::this_block().block_idx)
#define blockDim (::specdec::emu::detail::this_block().block_dim)
#define gridDim (::specdec::emu::detail::this_block().grid_dim)

// ------------------------------------------------------------------ qualifiers
// <cuda_runtime.h> already makes __device__, __global__, __host__, __forceinline__ no-ops.
#undef __shared__
#define __shared__ static thread_local
#define __launch_bounds__(...)

// ------------------------------------------------------------------ barriers and warp collectives
inline void __syncthreads(
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  ::specdec::emu::detail::vote(::specdec::emu::detail::Op::syncthreads, 0, 0, site);
}
inline int __syncthreads_count(int predicate, ::specdec::emu::detail::SourceSite site =
                                                  ::specdec::emu::detail::SourceSite::current()) {
  return static_cast<int>(::specdec::emu::detail::vote(
      ::specdec::emu::detail::Op::syncthreads_count, 0, predicate != 0, site));
}
inline int __syncthreads_and(int predicate, ::specdec::emu::detail::SourceSite site =
                                                ::specdec::emu::detail::SourceSite::current()) {
  return static_cast<int>(::specdec::emu::detail::vote(::specdec::emu::detail::Op::syncthreads_and,
                                                       0, predicate != 0, site));
}
inline int __syncthreads_or(int predicate, ::specdec::emu::detail::SourceSite site =
                                               ::specdec::emu::detail::SourceSite::current()) {
  return static_cast<int>(::specdec::emu::detail::vote(::specdec::emu::detail::Op::syncthreads_or,
                                                       0, predicate != 0, site));
}
inline void __syncwarp(
    unsigned mask = 0xffffffffu,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  ::specdec::emu::detail::vote(::specdec::emu::detail::Op::syncwarp, mask, 0, site);
}
template <class T>
T __shfl_sync(
    unsigned mask, T var, int src_lane, int width = 32,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return ::specdec::emu::detail::shuffle(::specdec::emu::detail::Op::shfl_idx, mask, var, src_lane,
                                         width, site);
}
template <class T>
T __shfl_up_sync(
    unsigned mask, T var, unsigned delta, int width = 32,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return ::specdec::emu::detail::shuffle(::specdec::emu::detail::Op::shfl_up, mask, var,
                                         static_cast<int>(delta), width, site);
}
template <class T>
T __shfl_down_sync(
    unsigned mask, T var, unsigned delta, int width = 32,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return ::specdec::emu::detail::shuffle(::specdec::emu::detail::Op::shfl_down, mask, var,
                                         static_cast<int>(delta), width, site);
}
template <class T>
T __shfl_xor_sync(
    unsigned mask, T var, int lane_mask, int width = 32,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return ::specdec::emu::detail::shuffle(::specdec::emu::detail::Op::shfl_xor, mask, var, lane_mask,
                                         width, site);
}
inline unsigned __ballot_sync(
    unsigned mask, int predicate,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return ::specdec::emu::detail::vote(::specdec::emu::detail::Op::ballot, mask, predicate != 0,
                                      site);
}
inline int __all_sync(
    unsigned mask, int predicate,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return static_cast<int>(
      ::specdec::emu::detail::vote(::specdec::emu::detail::Op::all, mask, predicate != 0, site));
}
inline int __any_sync(
    unsigned mask, int predicate,
    ::specdec::emu::detail::SourceSite site = ::specdec::emu::detail::SourceSite::current()) {
  return static_cast<int>(
      ::specdec::emu::detail::vote(::specdec::emu::detail::Op::any, mask, predicate != 0, site));
}

// Memory fences: the emulator runs one thread at a time, so they have nothing to order.
inline void __threadfence() {}
inline void __threadfence_block() {}

// ------------------------------------------------------------------ atomics
// One emulated thread runs at a time, so plain read-modify-write is atomic here. Contention and
// ordering on a GPU are not modelled.
template <class T>
T atomicAdd(T* address, T value) {
  T old = *address;
  *address = static_cast<T>(old + value);
  return old;
}
template <class T>
T atomicMax(T* address, T value) {
  T old = *address;
  if (value > old) *address = value;
  return old;
}
template <class T>
T atomicMin(T* address, T value) {
  T old = *address;
  if (value < old) *address = value;
  return old;
}
template <class T>
T atomicExch(T* address, T value) {
  T old = *address;
  *address = value;
  return old;
}
template <class T>
T atomicCAS(T* address, T compare, T value) {
  T old = *address;
  if (old == compare) *address = value;
  return old;
}

// ------------------------------------------------------------------ loads and bit intrinsics
template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline int __float_as_int(float f) {
  int x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<std::uint64_t>(a) * b) >> 32);
}

// ------------------------------------------------------------------ math intrinsics
// glibc declares __expf, __logf, ... in <math.h> but does not export them: cuda/emu/math.cpp
// defines them (as the exact functions; the device's fast approximations differ by a few ulp,
// which the tests' tolerances cover). The rest are defined here.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
