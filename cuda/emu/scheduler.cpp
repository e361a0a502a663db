// The emulator's block scheduler: runs the threads of one block as fibers, completes warp
// collectives and block barriers, and reports kernel bugs as specdec::emu::Fault.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "emu.hpp"
#include "fiber.hpp"
#include "runtime_internal.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SPECDEC_EMU_ASAN 1
#endif

namespace specdec::emu {

namespace {
std::atomic<Order> g_order{Order::forward};
}

void set_order(Order order) noexcept { g_order.store(order, std::memory_order_relaxed); }
Order order() noexcept { return g_order.load(std::memory_order_relaxed); }

namespace detail {

const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::none:
      return "(nothing)";
    case Op::syncthreads:
      return "__syncthreads";
    case Op::syncthreads_count:
      return "__syncthreads_count";
    case Op::syncthreads_and:
      return "__syncthreads_and";
    case Op::syncthreads_or:
      return "__syncthreads_or";
    case Op::syncwarp:
      return "__syncwarp";
    case Op::shfl_idx:
      return "__shfl_sync";
    case Op::shfl_up:
      return "__shfl_up_sync";
    case Op::shfl_down:
      return "__shfl_down_sync";
    case Op::shfl_xor:
      return "__shfl_xor_sync";
    case Op::ballot:
      return "__ballot_sync";
    case Op::all:
      return "__all_sync";
    case Op::any:
      return "__any_sync";
  }
  return "?";
}

namespace {

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr unsigned kWarp = 32;

std::string where(const SourceSite& s) {
  return fmt::format("{}:{} ({})", s.file, s.line, s.function);
}

struct Fiber {
  enum class State : std::uint8_t { ready, waiting, exited };
  Thread thread;
  Context context;
  State state = State::ready;
  void* asan_fake_stack = nullptr;
};

// Execution of one block: a "sweep" resumes every ready thread once, in the current order. A
// thread that blocks (or finishes) switches directly to the next ready thread of the sweep; the
// last one switches back to the scheduler (the launching thread's own stack), which then
// completes the collectives whose participants have all arrived and starts the next sweep.
class Scheduler {
 public:
  void run(const Launch& launch);
  void wait();                       // called on a fiber: block until the collective completes
  [[noreturn]] void finish_fiber();  // called on a fiber when its kernel body returned
  [[noreturn]] static void fiber_entry();
  Stats stats;

 private:
  void run_block(const Launch& launch, std::size_t threads);
  std::size_t index_at(std::size_t position) const noexcept {
    return forward_ ? position : threads_ - 1 - position;
  }
  Fiber* next_ready(std::size_t from_position);
  void start_sweep(Fiber& first);
  void leave(Fiber& f, bool exiting);
  void arrived(Fiber& f);
  bool complete_warp_collectives(std::size_t threads);
  bool complete_block_barrier(std::size_t threads);
  void compute_warp_collective(std::size_t warp_base, unsigned mask, Op op);
  [[noreturn]] void diagnose(std::size_t threads);
  [[noreturn]] void fault(const std::string& what) const;

  std::vector<FiberStack> stacks_;
  std::vector<Fiber> fibers_;
  std::vector<ucontext_t> ucontexts_;  // [threads + 1] with FiberKind::ucontext (last: main)
  Context main_;
  Fiber* current_ = nullptr;
  std::size_t threads_ = 0;   // of the running block
  bool forward_ = true;       // order of the running sweep
  std::size_t position_ = 0;  // of the running fiber in the sweep
  bool from_main_ = false;    // whether the running fiber was resumed by the scheduler
  const Launch* launch_ = nullptr;
  Block block_;
  std::exception_ptr kernel_exception_;
  bool stacks_dirty_ = false;  // fibers were abandoned mid-kernel (after a Fault)
  std::size_t exited_ = 0;     // threads of the current block that have finished
#if defined(SPECDEC_EMU_ASAN)
  void* main_fake_stack_ = nullptr;
  const void* main_stack_bottom_ = nullptr;
  std::size_t main_stack_size_ = 0;
#endif
};

Scheduler& scheduler() {
  static thread_local Scheduler instance;
  return instance;
}

// ------------------------------------------------------------------ fibers

Fiber* Scheduler::next_ready(std::size_t from_position) {
  for (std::size_t k = from_position; k < threads_; ++k) {
    Fiber& f = fibers_[index_at(k)];
    if (f.state == Fiber::State::ready) {
      position_ = k;
      return &f;
    }
  }
  return nullptr;
}

// On the fiber that was just switched to.
void Scheduler::arrived([[maybe_unused]] Fiber& f) {
#if defined(SPECDEC_EMU_ASAN)
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(f.asan_fake_stack, &bottom, &size);
  if (from_main_) {
    main_stack_bottom_ = bottom;
    main_stack_size_ = size;
  }
#endif
}

void Scheduler::fiber_entry() {
  Scheduler& s = scheduler();
  s.arrived(*s.current_);
  try {
    s.launch_->body();
  } catch (...) {
    if (!s.kernel_exception_) s.kernel_exception_ = std::current_exception();
  }
  s.finish_fiber();
}

// On fiber f: switch to the next ready fiber of the sweep, or back to the scheduler.
void Scheduler::leave(Fiber& f, bool exiting) {
  Fiber* next = next_ready(position_ + 1);
  Context* to = &main_;
#if defined(SPECDEC_EMU_ASAN)
  const void* bottom = main_stack_bottom_;
  std::size_t size = main_stack_size_;
#endif
  if (next != nullptr) {
    ++stats.fiber_switches;
    current_ = next;
    tl_thread = &next->thread;
    to = &next->context;
#if defined(SPECDEC_EMU_ASAN)
    const FiberStack& stack = stacks_[static_cast<std::size_t>(next - fibers_.data())];
    bottom = stack.bottom();
    size = stack.size();
#endif
  }
  from_main_ = false;
#if defined(SPECDEC_EMU_ASAN)
  if (exiting) {
    // The exiting fiber's live frames (entry, finish, this one) never return, so ASan never
    // clears their redzones; clear them now (from a little below this frame to the top of the
    // stack), so that the next block can build a fresh frame there.
    const FiberStack& own = stacks_[static_cast<std::size_t>(&f - fibers_.data())];
    char* const low = static_cast<char*>(own.bottom());
    char* const top = low + own.size();
    char* from = static_cast<char*>(__builtin_frame_address(0)) - 4096;
    if (from < low) from = low;
    ASAN_UNPOISON_MEMORY_REGION(from, static_cast<std::size_t>(top - from));
  }
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake_stack, bottom, size);
#else
  (void)exiting;
#endif
  switch_context(f.context, *to);
  arrived(f);  // resumed by the scheduler or by another fiber (never after exiting)
}

void Scheduler::finish_fiber() {
  Fiber& f = *current_;
  f.state = Fiber::State::exited;
  ++exited_;
  leave(f, true);
  __builtin_unreachable();
}

void Scheduler::wait() {
  Fiber& f = *current_;
  f.state = Fiber::State::waiting;
  leave(f, false);
}

// On the scheduler: runs one sweep, starting with `first`; returns when the sweep is over.
void Scheduler::start_sweep(Fiber& first) {
  current_ = &first;
  tl_thread = &first.thread;
  from_main_ = true;
  ++stats.fiber_switches;
#if defined(SPECDEC_EMU_ASAN)
  const FiberStack& stack = stacks_[static_cast<std::size_t>(&first - fibers_.data())];
  __sanitizer_start_switch_fiber(&main_fake_stack_, stack.bottom(), stack.size());
#endif
  switch_context(main_, first.context);
#if defined(SPECDEC_EMU_ASAN)
  __sanitizer_finish_switch_fiber(main_fake_stack_, nullptr, nullptr);
#endif
  tl_thread = nullptr;
  current_ = nullptr;
}

// ------------------------------------------------------------------ launches and blocks

void Scheduler::run(const Launch& launch) {
  const std::size_t threads = std::size_t{launch.block.x} * launch.block.y * launch.block.z;
  while (stacks_.size() < threads) stacks_.emplace_back(kStackBytes);
  if (fibers_.size() < threads) {
    fibers_.resize(threads);
    if (fiber_kind() == FiberKind::ucontext) {
      ucontexts_.resize(threads + 1);
      for (std::size_t i = 0; i < threads; ++i) fibers_[i].context.uc = &ucontexts_[i];
      main_.uc = &ucontexts_[threads];
    }
  }

  // Exact-size buffer, so that ASan sees overruns of dynamic shared memory.
  std::unique_ptr<unsigned char[]> dynamic_shared;
  if (launch.dynamic_shared > 0) dynamic_shared.reset(new unsigned char[launch.dynamic_shared]);

  launch_ = &launch;
  block_ = Block{};
  block_.block_dim = launch.block;
  block_.grid_dim = launch.grid;
  block_.dynamic_shared = dynamic_shared.get();
  tl_block = &block_;
  struct Reset {
    Scheduler& s;
    ~Reset() {
      tl_block = nullptr;
      tl_thread = nullptr;
      s.launch_ = nullptr;
    }
  } reset{*this};

  ++stats.launches;
  const std::size_t blocks = std::size_t{launch.grid.x} * launch.grid.y * launch.grid.z;
  const bool forward = order() == Order::forward;
  for (std::size_t k = 0; k < blocks; ++k) {
    const std::size_t b = forward ? k : blocks - 1 - k;
    block_.block_idx =
        uint3{static_cast<unsigned>(b % launch.grid.x),
              static_cast<unsigned>(b / launch.grid.x % launch.grid.y),
              static_cast<unsigned>(b / (std::size_t{launch.grid.x} * launch.grid.y))};
    if (dynamic_shared) std::fill_n(dynamic_shared.get(), launch.dynamic_shared, 0xFF);
    ++stats.blocks;
    run_block(launch, threads);
  }
}

void Scheduler::run_block(const Launch& launch, std::size_t threads) {
#if defined(SPECDEC_EMU_ASAN)
  // Frames abandoned by an earlier Fault left their redzones poisoned, on every stack it used.
  if (stacks_dirty_) {
    for (FiberStack& stack : stacks_) ASAN_UNPOISON_MEMORY_REGION(stack.bottom(), stack.size());
  }
#endif
  stacks_dirty_ = false;
  for (std::size_t i = 0; i < threads; ++i) {
    Fiber& f = fibers_[i];
    f.thread.op = Op::none;
    f.thread.predicate = 0;
    f.thread.linear = static_cast<unsigned>(i);
    f.thread.thread_idx =
        uint3{static_cast<unsigned>(i % launch.block.x),
              static_cast<unsigned>(i / launch.block.x % launch.block.y),
              static_cast<unsigned>(i / (std::size_t{launch.block.x} * launch.block.y))};
    f.state = Fiber::State::ready;
    f.asan_fake_stack = nullptr;
    make_context(f.context, stacks_[i], i, &Scheduler::fiber_entry);
  }
  exited_ = 0;

  threads_ = threads;
  try {
    for (;;) {
      forward_ = order() == Order::forward;
      if (Fiber* first = next_ready(0)) start_sweep(*first);
      if (kernel_exception_) {
        std::string what = "an exception";
        try {
          std::rethrow_exception(std::exchange(kernel_exception_, nullptr));
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        fault("a kernel thread threw: " + what);
      }
      if (exited_ == threads) return;
      if (complete_warp_collectives(threads)) continue;
      if (complete_block_barrier(threads)) continue;
      diagnose(threads);
    }
  } catch (...) {
    stacks_dirty_ = true;
    throw;
  }
}

// ------------------------------------------------------------------ collectives

bool Scheduler::complete_warp_collectives(std::size_t threads) {
  bool progressed = false;
  for (std::size_t i = 0; i < threads; ++i) {
    const Fiber& f = fibers_[i];
    if (f.state != Fiber::State::waiting || is_block_op(f.thread.op)) continue;
    const unsigned lane = static_cast<unsigned>(i % kWarp);
    const std::size_t base = i - lane;
    const unsigned mask = f.thread.mask;
    if (((mask >> lane) & 1u) == 0) {
      fault(fmt::format("{} at {}: thread {} is not in its own mask 0x{:08x}", op_name(f.thread.op),
                        where(f.thread.site), i, mask));
    }
    bool complete = true;
    for (unsigned l = 0; l < kWarp && complete; ++l) {
      if (((mask >> l) & 1u) == 0) continue;
      if (base + l >= threads) {
        complete = false;
        break;
      }
      const Fiber& g = fibers_[base + l];
      complete =
          g.state == Fiber::State::waiting && g.thread.op == f.thread.op && g.thread.mask == mask;
    }
    if (!complete) continue;
    compute_warp_collective(base, mask, f.thread.op);
    for (unsigned l = 0; l < kWarp; ++l) {
      if ((mask >> l) & 1u) fibers_[base + l].state = Fiber::State::ready;
    }
    progressed = true;
  }
  return progressed;
}

void Scheduler::compute_warp_collective(std::size_t base, unsigned mask, Op op) {
  unsigned votes = 0;
  for (unsigned l = 0; l < kWarp; ++l) {
    if (((mask >> l) & 1u) && fibers_[base + l].thread.predicate) votes |= 1u << l;
  }
  for (unsigned l = 0; l < kWarp; ++l) {
    if (((mask >> l) & 1u) == 0) continue;
    Thread& t = fibers_[base + l].thread;
    switch (op) {
      case Op::syncwarp:
        break;
      case Op::ballot:
        t.result_word = votes;
        break;
      case Op::all:
        t.result_word = votes == mask ? 1u : 0u;
        break;
      case Op::any:
        t.result_word = votes != 0 ? 1u : 0u;
        break;
      case Op::shfl_idx:
      case Op::shfl_up:
      case Op::shfl_down:
      case Op::shfl_xor: {
        const int width = t.width;
        if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
          fault(fmt::format("{} at {}: width {} is not a power of two in [1, 32]", op_name(op),
                            where(t.site), width));
        }
        const auto w = static_cast<unsigned>(width);
        const unsigned group = l & ~(w - 1);
        const auto p = static_cast<unsigned>(t.param);
        unsigned src = l;
        if (op == Op::shfl_idx) src = group + (p & (w - 1));
        if (op == Op::shfl_up && l - group >= p) src = l - p;
        if (op == Op::shfl_down && l - group + p < w) src = l + p;
        if (op == Op::shfl_xor) {
          const unsigned x = l ^ (p & 31u);
          if (x / w <= l / w) src = x;  // later groups are out of reach: own value
        }
        if (((mask >> src) & 1u) == 0) {
          fault(fmt::format("{} at {}: lane {} reads lane {}, which is not in the mask 0x{:08x}",
                            op_name(op), where(t.site), l, src, mask));
        }
        std::memcpy(t.result, fibers_[base + src].thread.value, sizeof t.result);
        break;
      }
      default:
        break;
    }
  }
}

bool Scheduler::complete_block_barrier(std::size_t threads) {
  const Fiber* first = nullptr;
  for (std::size_t i = 0; i < threads; ++i) {
    const Fiber& f = fibers_[i];
    if (f.state == Fiber::State::exited) return false;  // diagnose() explains
    if (f.state != Fiber::State::waiting || !is_block_op(f.thread.op)) return false;
    if (first == nullptr) {
      first = &f;
      continue;
    }
    const auto& a = first->thread.site;
    const auto& b = f.thread.site;
    if (f.thread.op != first->thread.op || a.line != b.line || a.column != b.column ||
        std::strcmp(a.file, b.file) != 0) {
      return false;
    }
  }
  if (first == nullptr) return false;
  unsigned count = 0;
  for (std::size_t i = 0; i < threads; ++i) count += fibers_[i].thread.predicate != 0 ? 1u : 0u;
  unsigned result = 0;
  switch (first->thread.op) {
    case Op::syncthreads_count:
      result = count;
      break;
    case Op::syncthreads_and:
      result = count == threads ? 1u : 0u;
      break;
    case Op::syncthreads_or:
      result = count > 0 ? 1u : 0u;
      break;
    default:
      break;
  }
  for (std::size_t i = 0; i < threads; ++i) {
    fibers_[i].thread.result_word = result;
    fibers_[i].state = Fiber::State::ready;
  }
  return true;
}

// ------------------------------------------------------------------ diagnostics

void Scheduler::fault(const std::string& what) const {
  const Launch& l = *launch_;
  throw Fault(fmt::format(
      "CUDA emulator: {} [block ({},{},{}) of a launch with grid ({},{},{}), block ({},{},{})]",
      what, block_.block_idx.x, block_.block_idx.y, block_.block_idx.z, l.grid.x, l.grid.y,
      l.grid.z, l.block.x, l.block.y, l.block.z));
}

void Scheduler::diagnose(std::size_t threads) {
  auto describe = [&](std::size_t j) {
    const Fiber& g = fibers_[j];
    if (g.state == Fiber::State::exited) return fmt::format("thread {} has exited", j);
    return fmt::format("thread {} waits in {} (mask 0x{:08x}) at {}", j, op_name(g.thread.op),
                       g.thread.mask, where(g.thread.site));
  };
  // A warp collective that cannot complete: name the lane that is missing and why.
  for (std::size_t i = 0; i < threads; ++i) {
    const Fiber& f = fibers_[i];
    if (f.state != Fiber::State::waiting || is_block_op(f.thread.op)) continue;
    const std::size_t base = i - i % kWarp;
    for (unsigned l = 0; l < kWarp; ++l) {
      if (((f.thread.mask >> l) & 1u) == 0) continue;
      const std::size_t j = base + l;
      const std::string head =
          fmt::format("{} at {} (thread {}, mask 0x{:08x})", op_name(f.thread.op),
                      where(f.thread.site), i, f.thread.mask);
      if (j >= threads) {
        fault(fmt::format("{} names lane {}, which does not exist (the block has {} threads)", head,
                          l, threads));
      }
      const Fiber& g = fibers_[j];
      if (g.state == Fiber::State::exited) {
        fault(fmt::format("{} names lane {}, but {}: a shuffle with inactive lanes in its mask",
                          head, l, describe(j)));
      }
      if (g.thread.op != f.thread.op || g.thread.mask != f.thread.mask) {
        fault(fmt::format("{} can never complete: {}", head, describe(j)));
      }
    }
  }
  // A block barrier that cannot complete.
  std::size_t waiting = threads;
  for (std::size_t i = 0; i < threads; ++i) {
    if (fibers_[i].state == Fiber::State::waiting && is_block_op(fibers_[i].thread.op)) {
      waiting = i;
      break;
    }
  }
  if (waiting < threads) {
    for (std::size_t j = 0; j < threads; ++j) {
      const Fiber& g = fibers_[j];
      const auto& a = fibers_[waiting].thread.site;
      const auto& b = g.thread.site;
      const bool same = g.state == Fiber::State::waiting &&
                        g.thread.op == fibers_[waiting].thread.op && a.line == b.line &&
                        a.column == b.column && std::strcmp(a.file, b.file) == 0;
      if (!same) {
        fault(fmt::format("__syncthreads in divergent code: thread {} waits in {} at {}, but {}",
                          waiting, op_name(fibers_[waiting].thread.op),
                          where(fibers_[waiting].thread.site), describe(j)));
      }
    }
  }
  fault("deadlock: no thread can make progress");
}

}  // namespace

void wait_collective() { scheduler().wait(); }

void submit(Launch launch) {
  if (tl_thread != nullptr) {
    throw Fault(
        "CUDA emulator: kernel launch from device code (dynamic parallelism) is not emulated");
  }
  const dim3 g = launch.grid;
  const dim3 b = launch.block;
  const std::size_t threads = std::size_t{b.x} * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0 || threads > 1024 ||
      b.x > 1024 || b.y > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (launch.dynamic_shared > max_dynamic_shared(launch.kernel)) {
    set_last_error(cudaErrorInvalidValue);
    return;
  }
  const cudaStream_t stream = launch.stream;
  auto shared = std::make_shared<Launch>(std::move(launch));
  const cudaError_t status = enqueue(stream, [shared] { scheduler().run(*shared); });
  if (status != cudaSuccess) set_last_error(status);
}

void check_kernel_pointer(const void* p, std::size_t argument, const void* kernel) {
  if (p == nullptr || is_registered(p, 0)) return;
  throw Fault(
      fmt::format("CUDA emulator: argument {} of the kernel at {} is a pointer to memory that was "
                  "not allocated "
                  "with cudaMalloc or cudaMallocHost (a host pointer passed to a kernel?)",
                  argument, kernel));
}

}  // namespace detail

Stats stats() noexcept { return detail::scheduler().stats; }

}  // namespace specdec::emu
