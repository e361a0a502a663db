// Fiber stacks and the two context-switch implementations (see fiber.hpp).
#include "fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#if defined(__x86_64__)
// specdec_emu_switch(void** save_sp, void* load_sp): pushes the callee-saved registers on the
// current stack, stores the stack pointer in *save_sp, loads load_sp and pops the same layout
// from there. A fresh fiber's stack is prepared by make_context() in that layout with the entry
// function as the return address. The floating-point control words (MXCSR, x87 CW) are not
// switched: kernels never change rounding modes, and ldmxcsr/fldcw would double the cost.
asm(R"(
  .pushsection .text
  .globl specdec_emu_switch
  .type specdec_emu_switch, @function
specdec_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size specdec_emu_switch, .-specdec_emu_switch
  .popsection
)");
extern "C" void specdec_emu_switch(void** save_sp, void* load_sp);
#endif

namespace specdec::emu::detail {

namespace {

bool shadow_stack_active() {
  // Linux >= 6.6 lists the enabled x86 user-space features of the thread here.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("x86_Thread_features:", 0) == 0) return line.find("shstk") != std::string::npos;
  }
  return false;
}

FiberKind choose_fiber_kind() {
  if (const char* env = std::getenv("SPECDEC_EMU_FIBERS")) {
    if (std::strcmp(env, "ucontext") == 0) return FiberKind::ucontext;
  }
#if defined(__x86_64__)
  if (!shadow_stack_active()) return FiberKind::assembly;
#endif
  return FiberKind::ucontext;
}

}  // namespace

FiberKind fiber_kind() noexcept {
  static const FiberKind kind = choose_fiber_kind();
  return kind;
}

const bool kAssemblyFibers = fiber_kind() == FiberKind::assembly;

FiberStack::FiberStack(std::size_t size) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  size_ = (size + page - 1) / page * page;
  mapping_size_ = size_ + page;
  mapping_ =
      mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) throw std::bad_alloc();
  // The guard page below the stack turns an overflow into a segmentation fault, not corruption.
  mprotect(mapping_, page, PROT_NONE);
  bottom_ = static_cast<char*>(mapping_) + page;
}

FiberStack::FiberStack(FiberStack&& other) noexcept
    : mapping_(other.mapping_),
      mapping_size_(other.mapping_size_),
      bottom_(other.bottom_),
      size_(other.size_) {
  other.mapping_ = nullptr;
}

FiberStack::~FiberStack() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
}

void make_context(Context& ctx, FiberStack& stack, std::size_t colour, void (*entry)()) {
  // Stacks are page-aligned, so without an offset the hot tops of all fibers' stacks would map
  // to the same cache sets and evict each other at every switch.
  const std::size_t offset = (colour % 61) * 4 * 64;
#if defined(__x86_64__)
  if (fiber_kind() == FiberKind::assembly) {
    auto top = reinterpret_cast<std::uintptr_t>(stack.bottom()) + stack.size() - offset;
    top &= ~std::uintptr_t{15};
    auto* sp = reinterpret_cast<std::uint64_t*>(top);
    // After specdec_emu_switch's final `ret` pops `entry`, rsp points at this fake return
    // address, 8 bytes below a 16-byte boundary: exactly as if entry had been called.
    *--sp = 0;
    *--sp = reinterpret_cast<std::uint64_t>(entry);
    for (int reg = 0; reg < 6; ++reg) *--sp = 0;  // rbp rbx r12 r13 r14 r15
    ctx.sp = sp;
    return;
  }
#endif
  getcontext(ctx.uc);
  ctx.uc->uc_stack.ss_sp = stack.bottom();
  ctx.uc->uc_stack.ss_size = stack.size() - offset;
  ctx.uc->uc_link = nullptr;
  makecontext(ctx.uc, entry, 0);
}

void switch_context(Context& from, Context& to) {
#if defined(__x86_64__)
  if (kAssemblyFibers) {
    specdec_emu_switch(&from.sp, to.sp);
    return;
  }
#endif
  swapcontext(from.uc, to.uc);
}

}  // namespace specdec::emu::detail
