#pragma once
// Fibers for the CUDA emulator: one stack per emulated thread, switched cooperatively.
//
// Two implementations of the switch:
//   - ucontext (makecontext / swapcontext): portable, but swapcontext saves and restores the
//     signal mask with a system call (about 0.6 us per resumed thread on the project's machine);
//   - a 14-instruction x86-64 switch of the callee-saved registers (about 40 ns per resumed
//     thread, mostly cache misses on the thread's stack), so that emulated kernels with warp
//     shuffles in their inner loops still run in milliseconds. It is not shadow-stack aware, so
//     it is used only on x86-64 when the process has no CET shadow stack;
//     SPECDEC_EMU_FIBERS=ucontext forces the portable one.
// Under AddressSanitizer every switch is announced with __sanitizer_{start,finish}_switch_fiber
// so that ASan knows which stack is live.

#include <ucontext.h>
#include <cstddef>

namespace specdec::emu::detail {

enum class FiberKind { assembly, ucontext };

/// The switch implementation chosen for this process (environment + CPU + shadow-stack check).
FiberKind fiber_kind() noexcept;

/// Whether fiber_kind() is FiberKind::assembly (read on every switch: a plain global).
extern const bool kAssemblyFibers;

/// A fiber's stack: mmap'ed, with a PROT_NONE guard page below it.
class FiberStack {
 public:
  explicit FiberStack(std::size_t size);
  FiberStack(FiberStack&& other) noexcept;
  FiberStack& operator=(FiberStack&&) = delete;
  FiberStack(const FiberStack&) = delete;
  ~FiberStack();

  [[nodiscard]] void* bottom() const noexcept { return bottom_; }  ///< lowest usable address
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  void* mapping_ = nullptr;
  std::size_t mapping_size_ = 0;
  void* bottom_ = nullptr;
  std::size_t size_ = 0;
};

/// A saved execution context: a stack pointer (assembly switch) or a ucontext_t, which is large
/// (~1 KB) and therefore kept outside, so that the scheduler's scans over its threads stay in
/// cache.
struct Context {
  void* sp = nullptr;
  ucontext_t* uc = nullptr;  ///< required for FiberKind::ucontext
};

/// Prepares `ctx` so that switching to it calls entry() on `stack` (its top offset by a few
/// cache lines chosen by `colour`, the fiber's index). entry must never return.
void make_context(Context& ctx, FiberStack& stack, std::size_t colour, void (*entry)());

/// Saves the current context into `from` and resumes `to`.
void switch_context(Context& from, Context& to);

}  // namespace specdec::emu::detail
