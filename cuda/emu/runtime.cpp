// Host versions of the CUDA runtime calls the project uses, for the emulation build (which never
// links libcudart). Device memory is host heap memory filled with 0xFF bytes (NaN) at
// allocation; every allocation is registered so that copies with the wrong direction and host
// pointers passed to kernels are reported. Streams run their work immediately, except while
// they are captured into a graph: then kernel launches, async copies and memsets are recorded
// and run again by each cudaGraphLaunch, with the arguments fixed at capture, as on a GPU. So the
// emulated tests also check that a captured step reads everything that changes from device
// memory rather than from baked-in kernel arguments.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "emu.hpp"
#include "runtime_internal.hpp"

// The runtime's opaque handle types, completed here.
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;
  cudaGraph_t graph = nullptr;
};
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};
struct CUevent_st {
  bool recorded = false;  // the emulator runs work at once, so a recorded event is complete
};

namespace specdec::emu::detail {

namespace {

constexpr std::size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee

struct Allocation {
  std::size_t bytes = 0;
  bool device = true;  // false: cudaMallocHost / cudaHostAlloc
};

struct State {
  std::mutex mutex;
  std::map<std::uintptr_t, Allocation> allocations;  // by base address
  std::set<CUstream_st*> streams;
  std::unordered_map<const void*, std::size_t> max_dynamic_shared;
};

State& state() {
  static State s;
  return s;
}

thread_local cudaError_t tl_last_error = cudaSuccess;

const Allocation* find(const void* p, std::size_t bytes, bool* device) {
  auto& s = state();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.allocations.upper_bound(a);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  const std::uintptr_t end = it->first + it->second.bytes;
  const bool inside = bytes == 0 ? a <= end : (a < end && bytes <= end - a);
  if (!inside) return nullptr;
  if (device != nullptr) *device = it->second.device;
  return &it->second;
}

// Whether [p, p + bytes) is device-accessible (device or pinned host memory).
bool accessible(const void* p, std::size_t bytes) {
  std::lock_guard lock(state().mutex);
  return find(p, bytes, nullptr) != nullptr;
}

bool any_capture() {
  auto& s = state();
  return std::any_of(s.streams.begin(), s.streams.end(),
                     [](CUstream_st* st) { return st->capturing; });
}

void invalidate_captures() {
  for (CUstream_st* st : state().streams) {
    if (st->capturing) st->invalidated = true;
  }
}

// Synchronous calls are not allowed while a stream is captured in global mode.
cudaError_t check_not_capturing() {
  std::lock_guard lock(state().mutex);
  if (!any_capture()) return cudaSuccess;
  invalidate_captures();
  return cudaErrorStreamCaptureUnsupported;
}

bool is_default_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) tl_last_error = e;
  return e;
}

cudaError_t check_copy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  bool dst_device = false;
  bool src_device = false;
  const bool dst_known = find(dst, count, &dst_device) != nullptr;
  const bool src_known = find(src, count, &src_device) != nullptr;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return dst_known && dst_device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost:
      return src_known && src_device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
      return dst_known && dst_device && src_known && src_device ? cudaSuccess
                                                                : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return cudaSuccess;
  }
  return cudaErrorInvalidMemcpyDirection;
}

cudaError_t allocate(void** p, std::size_t bytes, bool device) {
  if (p == nullptr) return cudaErrorInvalidValue;
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* mem = ::operator new (bytes, std::align_val_t{kDeviceAlignment}, std::nothrow);
  if (mem == nullptr) return cudaErrorMemoryAllocation;
  std::memset(mem, 0xFF, bytes);  // uninitialised device memory reads as NaN / -1
  std::lock_guard lock(state().mutex);
  state().allocations[reinterpret_cast<std::uintptr_t>(mem)] = Allocation{bytes, device};
  *p = mem;
  return cudaSuccess;
}

cudaError_t release(void* p, bool device) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard lock(state().mutex);
    auto it = state().allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == state().allocations.end() || it->second.device != device)
      return cudaErrorInvalidValue;
    state().allocations.erase(it);
  }
  ::operator delete (p, std::align_val_t{kDeviceAlignment});
  return cudaSuccess;
}

}  // namespace

void set_last_error(cudaError_t error) noexcept { tl_last_error = error; }

cudaError_t enqueue(cudaStream_t stream, std::function<void()> work) {
  {
    std::lock_guard lock(state().mutex);
    if (!is_default_stream(stream)) {
      auto* st = static_cast<CUstream_st*>(stream);
      if (state().streams.count(st) == 0) return cudaErrorInvalidResourceHandle;
      if (st->capturing) {
        st->graph->nodes.push_back(std::move(work));
        return cudaSuccess;
      }
    } else if (any_capture()) {
      invalidate_captures();
      return cudaErrorStreamCaptureImplicit;
    }
  }
  work();
  return cudaSuccess;
}

std::size_t max_dynamic_shared(const void* kernel) noexcept {
  std::lock_guard lock(state().mutex);
  auto it = state().max_dynamic_shared.find(kernel);
  return it == state().max_dynamic_shared.end() ? kDefaultDynamicShared : it->second;
}

bool is_registered(const void* p, std::size_t bytes) noexcept { return accessible(p, bytes); }

}  // namespace specdec::emu::detail

using specdec::emu::detail::record;

// ------------------------------------------------------------------ the runtime API
extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (auto e = specdec::emu::detail::check_not_capturing(); e != cudaSuccess) return record(e);
  return record(specdec::emu::detail::allocate(p, bytes, true));
}
cudaError_t cudaFree(void* p) { return record(specdec::emu::detail::release(p, true)); }
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return record(specdec::emu::detail::allocate(p, bytes, false));
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int /*flags*/) {
  return record(specdec::emu::detail::allocate(p, bytes, false));
}
cudaError_t cudaFreeHost(void* p) { return record(specdec::emu::detail::release(p, false)); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  if (auto e = specdec::emu::detail::check_not_capturing(); e != cudaSuccess) return record(e);
  if (auto e = specdec::emu::detail::check_copy(dst, src, count, kind); e != cudaSuccess)
    return record(e);
  if (count > 0) std::memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (auto e = specdec::emu::detail::check_copy(dst, src, count, kind); e != cudaSuccess)
    return record(e);
  if (count == 0) return cudaSuccess;
  return record(specdec::emu::detail::enqueue(stream, [=] { std::memmove(dst, src, count); }));
}
cudaError_t cudaMemset(void* p, int value, size_t count) {
  if (auto e = specdec::emu::detail::check_not_capturing(); e != cudaSuccess) return record(e);
  if (count > 0 && !specdec::emu::detail::accessible(p, count))
    return record(cudaErrorInvalidValue);
  if (count > 0) std::memset(p, value, count);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  if (count > 0 && !specdec::emu::detail::accessible(p, count))
    return record(cudaErrorInvalidValue);
  if (count == 0) return cudaSuccess;
  return record(specdec::emu::detail::enqueue(stream, [=] { std::memset(p, value, count); }));
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes != nullptr) *free_bytes = size_t{16} << 30;
  if (total_bytes != nullptr) *total_bytes = size_t{16} << 30;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return record(specdec::emu::detail::check_not_capturing());
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return record(specdec::emu::detail::check_not_capturing());
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (stream == nullptr) return record(cudaErrorInvalidValue);
  auto* st = new CUstream_st;
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  specdec::emu::detail::state().streams.insert(st);
  *stream = st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  return cudaStreamCreate(stream);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  auto& streams = specdec::emu::detail::state().streams;
  auto it = streams.find(stream);
  if (it == streams.end()) return record(cudaErrorInvalidResourceHandle);
  delete (*it)->graph;
  delete *it;
  streams.erase(it);
  return cudaSuccess;
}

// Events: work runs when it is enqueued (outside captures), so every recorded event has
// completed; a record on a capturing stream becomes a graph node. Waits are then no-ops, and
// there is no cudaEventElapsedTime: emulated times would mean nothing.
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return record(cudaErrorInvalidValue);
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  return cudaEventCreate(event);
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  return record(specdec::emu::detail::enqueue(stream, [event] { event->recorded = true; }));
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event == nullptr ? record(cudaErrorInvalidResourceHandle) : cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  return record(specdec::emu::detail::check_not_capturing());
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  if (!specdec::emu::detail::is_default_stream(stream) &&
      specdec::emu::detail::state().streams.count(stream) == 0)
    return record(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode) {
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  auto& streams = specdec::emu::detail::state().streams;
  if (specdec::emu::detail::is_default_stream(stream))
    return record(cudaErrorStreamCaptureUnsupported);
  if (streams.count(stream) == 0) return record(cudaErrorInvalidResourceHandle);
  if (stream->capturing) return record(cudaErrorIllegalState);
  stream->capturing = true;
  stream->invalidated = false;
  stream->graph = new CUgraph_st;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  auto& streams = specdec::emu::detail::state().streams;
  if (graph == nullptr || streams.count(stream) == 0 || !stream->capturing) {
    return record(cudaErrorIllegalState);
  }
  stream->capturing = false;
  *graph = nullptr;
  if (stream->invalidated) {
    delete stream->graph;
    stream->graph = nullptr;
    return record(cudaErrorStreamCaptureInvalidated);
  }
  *graph = std::exchange(stream->graph, nullptr);
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  if (status == nullptr) return record(cudaErrorInvalidValue);
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  *status = cudaStreamCaptureStatusNone;
  if (!specdec::emu::detail::is_default_stream(stream) &&
      specdec::emu::detail::state().streams.count(stream) != 0 && stream->capturing) {
    *status =
        stream->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return record(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return record(cudaErrorInvalidValue);
  // Replaying on a capturing stream would nest graphs; the project never does it.
  cudaStreamCaptureStatus status{};
  cudaStreamIsCapturing(stream, &status);
  if (status != cudaStreamCaptureStatusNone) return record(cudaErrorStreamCaptureUnsupported);
  for (const auto& node : exec->nodes) node();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  return std::exchange(specdec::emu::detail::tl_last_error, cudaSuccess);
}
cudaError_t cudaPeekAtLastError(void) { return specdec::emu::detail::tl_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    default:
      return "cudaError (emulator: unnamed)";
  }
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return "unknown error (emulator)";
  }
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  // The emulated device; SPECDEC_EMU_DEVICES=0 emulates a machine without one (the runtime's
  // answer there), for the tests of that error path.
  const char* devices = std::getenv("SPECDEC_EMU_DEVICES");
  if (devices != nullptr && std::string_view(devices) == "0") {
    *count = 0;
    return record(cudaErrorNoDevice);
  }
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return record(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : record(cudaErrorInvalidDevice);
}
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr || device != 0) return record(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = specdec::emu::kMultiProcessors;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(specdec::emu::kDefaultDynamicShared);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(specdec::emu::kMaxDynamicShared);
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 8;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 6;
      break;
    default:
      return record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (func == nullptr) return record(cudaErrorInvalidDeviceFunction);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || static_cast<std::size_t>(value) > specdec::emu::kMaxDynamicShared) {
    return record(cudaErrorInvalidValue);
  }
  std::lock_guard lock(specdec::emu::detail::state().mutex);
  specdec::emu::detail::state().max_dynamic_shared[func] = static_cast<std::size_t>(value);
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

}  // extern "C"
