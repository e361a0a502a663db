// ThreadPool: dynamic task hand-out, short spins, then futex sleeps (see thread_pool.hpp).
#include "specdec/cpu/thread_pool.hpp"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>

#include "specdec/common.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPECDEC_PAUSE() _mm_pause()
#else
#define SPECDEC_PAUSE() std::this_thread::yield()
#endif

namespace specdec::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// Workers keep spinning this long after a job so that the next operation of the same forward
// pass (usually a few microseconds later) starts without a wake-up; then they sleep. Short, so
// that a spinning worker never holds a CPU for long that the caller (or a descheduled thread of
// ours) needs.
constexpr auto worker_spin = std::chrono::microseconds(100);
// The caller waits this long for a task another thread still holds before sleeping, which gives
// the CPU to that thread if it was descheduled.
constexpr auto caller_spin = std::chrono::microseconds(20);

// Sleeping and waking on a 32-bit atomic. On Linux the futex system call directly: std::atomic's
// wait() first spins and yields on its own schedule, and we already spent our spin budget.
void wait_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t expected) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  // Returns at once when the word no longer holds `expected` (checked atomically by the kernel).
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  word.wait(expected);
#endif
}

void wake_all(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX,
          nullptr, nullptr, 0);
#else
  word.notify_all();
#endif
}

/// Spins until pred() or the budget runs out; true when pred() held.
template <class Pred>
bool spin_until(Pred pred, Clock::duration budget) {
  const auto deadline = Clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      SPECDEC_PAUSE();
    }
    if (Clock::now() >= deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(std::size_t threads) {
  if (threads == 0) threads = 1;
  try {
    workers_.reserve(threads - 1);
    for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_main(i); });
  } catch (const std::exception& e) {
    // The destructor does not run for a constructor that throws, and a std::thread destroyed
    // while joinable calls std::terminate: stop and join the workers already running first.
    const std::size_t started = workers_.size() + 1;  // the calling thread is thread 1
    stop_workers();
    const auto* system = dynamic_cast<const std::system_error*>(&e);
    throw Error(fmt::format(
        "ThreadPool: cannot start thread {} of {}: {} (ask for fewer threads; each one reserves "
        "a stack)",
        started + 1, threads, system ? system->code().message() : std::string(e.what())));
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() noexcept {
  stop_.store(true);
  generation_.fetch_add(1);
  wake_all(generation_);
  for (auto& w : workers_) w.join();
  workers_.clear();
}

std::shared_ptr<ThreadPool> ThreadPool::shared(std::size_t threads) {
  static std::mutex mutex;
  static std::map<std::size_t, std::weak_ptr<ThreadPool>> pools;
  const std::lock_guard lock(mutex);
  std::weak_ptr<ThreadPool>& slot = pools[threads];
  std::shared_ptr<ThreadPool> pool = slot.lock();
  if (!pool) {
    pool = std::make_shared<ThreadPool>(threads);
    slot = pool;
  }
  return pool;
}

void ThreadPool::work(std::size_t thread) {
  for (;;) {
    const std::uint64_t claim = claim_.fetch_add(1, std::memory_order_acq_rel);
    const std::size_t task = claim & 0xffffffffu;
    const std::size_t tasks = claim >> 32;
    if (task >= tasks) return;
    call_(ctx_, task, thread);
    if (done_tasks_.fetch_add(1) + 1 == tasks) {
      // Last task: wake the caller if it went to sleep (Dekker pair with caller_sleeping_).
      if (caller_sleeping_.load() != 0) wake_all(done_tasks_);
    }
  }
}

void ThreadPool::run_erased(std::size_t tasks, Call call, void* ctx) {
  if (tasks >= 0x80000000u) throw std::length_error("ThreadPool::run: 2^31 tasks or more");
  const std::lock_guard lock(run_mutex_);
  call_ = call;
  ctx_ = ctx;
  done_tasks_.store(0, std::memory_order_relaxed);
  claim_.store(static_cast<std::uint64_t>(tasks) << 32, std::memory_order_release);
  generation_.fetch_add(1);  // seq_cst: pairs with sleeping_workers_ in worker_main
  if (sleeping_workers_.load() != 0) wake_all(generation_);

  work(0);

  // Wait for tasks still held by other threads: spin briefly, then sleep.
  auto all_done = [&] { return done_tasks_.load(std::memory_order_acquire) == tasks; };
  if (spin_until(all_done, caller_spin)) return;
  for (;;) {
    const std::uint32_t seen = done_tasks_.load();
    if (seen == tasks) return;
    caller_sleeping_.store(1);
    if (done_tasks_.load() == seen) wait_while_equal(done_tasks_, seen);
    caller_sleeping_.store(0);
  }
}

void ThreadPool::worker_main(std::size_t index) {
  // The generation at construction, not a load: a worker that starts late must still notice the
  // jobs (and the stop) published before it ran.
  std::uint32_t seen = 0;
  for (;;) {
    auto new_job = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(new_job, worker_spin)) {
      sleeping_workers_.fetch_add(1);  // seq_cst: pairs with the generation_ bump in run_erased
      if (generation_.load() == seen) wait_while_equal(generation_, seen);
      sleeping_workers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    work(index);
  }
}

}  // namespace specdec::cpu
