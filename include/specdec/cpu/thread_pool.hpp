#pragma once
// A persistent pool of worker threads for the CPU backend's parallel loops.
//
// Why not a barrier per operation: a decode step is ~100 dependent parallel operations (5 per
// layer). With a spinning barrier, one worker descheduled by a competing process stalls every
// operation until the OS runs it again, and the threads that spin meanwhile burn the very CPU
// it needs (llama.cpp's 2-thread decode got ~90x slower that way on this project's 2-core
// machine). Here:
//  - tasks are handed out one at a time from an atomic counter, and the calling thread works
//    too: if a worker is not running, the others simply take its share; only a task it has
//    already claimed can delay the operation;
//  - waiting threads spin only briefly (tens of microseconds), then sleep in the kernel (futex),
//    which hands their CPU to the thread they are waiting for;
//  - and when that is still not enough — a competing process keeps preempting the workers while
//    they hold tasks, so that the caller spends a large part of each run waiting for them — the
//    pool notices (StallMonitor) and runs everything on the calling thread for a while, then
//    tries the workers again. With one CPU-bound neighbour on a 2-core machine this keeps a
//    2-thread pool from being slower than a 1-thread one. Which thread runs a task never changes
//    its result, so neither does the mode.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace specdec::cpu {

/// Decides, from how long the caller of each parallel run waited for tasks that other threads
/// had claimed (the "stall"), whether the next runs should use the workers. Runs are judged in
/// windows of `window` runs: a window whose stalls exceed `max_stall_fraction` of its wall time
/// sends the pool solo (caller only) for `solo_windows` windows, doubled (up to 64) each time
/// the following trial window stalls again, and reset once a trial window is clean. Plain
/// arithmetic, no clock: the pool feeds it the times.
class StallMonitor {
 public:
  struct Options {
    std::size_t window = 64;          ///< runs per decision
    double max_stall_fraction = 0.2;  ///< of the window's wall time
    std::size_t solo_windows = 4;     ///< first back-off, in windows
    std::size_t max_solo_windows = 64;
  };
  StallMonitor() : StallMonitor(Options{}) {}
  explicit StallMonitor(Options options) : options_(options), backoff_(options.solo_windows) {}

  /// Whether the next run should hand tasks to the workers.
  [[nodiscard]] bool parallel() const noexcept { return solo_runs_left_ == 0; }

  /// Records a run: wall time, and the part of it the caller spent waiting for other threads
  /// after it ran out of tasks to claim (0 for a solo run).
  void record(double run_seconds, double stall_seconds) noexcept {
    if (solo_runs_left_ > 0) {
      --solo_runs_left_;
      return;
    }
    run_seconds_ += run_seconds;
    stall_seconds_ += stall_seconds;
    if (++runs_ < options_.window) return;
    const bool stalled = stall_seconds_ > options_.max_stall_fraction * run_seconds_;
    runs_ = 0;
    run_seconds_ = stall_seconds_ = 0;
    if (stalled) {
      solo_runs_left_ = backoff_ * options_.window;
      backoff_ =
          backoff_ * 2 > options_.max_solo_windows ? options_.max_solo_windows : backoff_ * 2;
      ++solo_periods_;
    } else {
      backoff_ = options_.solo_windows;
    }
  }

  /// How many times the monitor switched to solo runs (for benchmarks and tests).
  [[nodiscard]] std::size_t solo_periods() const noexcept { return solo_periods_; }

 private:
  Options options_;
  std::size_t backoff_;
  std::size_t runs_ = 0;
  double run_seconds_ = 0, stall_seconds_ = 0;
  std::size_t solo_runs_left_ = 0;
  std::size_t solo_periods_ = 0;
};

class ThreadPool {
 public:
  /// threads >= 1: the caller plus threads - 1 workers.
  explicit ThreadPool(std::size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

  /// Runs fn(task, thread) for every task in [0, tasks) and returns when all are done. `thread`
  /// in [0, size()) names the thread running the task (for per-thread scratch); the caller is 0.
  /// fn must not throw. Calls from several threads at once are serialised.
  template <class F>
  void run(std::size_t tasks, F&& fn) {
    if (tasks == 0) return;
    if (tasks == 1 || workers_.empty() || !monitor_parallel()) {
      for (std::size_t i = 0; i < tasks; ++i) fn(i, std::size_t{0});
      if (tasks > 1 && !workers_.empty()) record_solo_run();
      return;
    }
    run_erased(
        tasks,
        [](void* ctx, std::size_t task, std::size_t thread) {
          (*static_cast<F*>(ctx))(task, thread);
        },
        &fn);
  }

  /// One pool per thread count for the whole process, shared by every Transformer that asks for
  /// that count (a draft and a target alternate on the same workers instead of competing).
  static std::shared_ptr<ThreadPool> shared(std::size_t threads);

  /// Times the pool fell back to running on the caller alone because its workers kept stalling
  /// (see StallMonitor); 0 on a quiet machine.
  [[nodiscard]] std::size_t solo_periods() const;

 private:
  using Call = void (*)(void*, std::size_t, std::size_t);
  void run_erased(std::size_t tasks, Call call, void* ctx);
  void worker_main(std::size_t index);
  void work(std::size_t thread);
  bool monitor_parallel();
  void record_solo_run();

  mutable std::mutex monitor_mutex_;  // guards monitor_ (runs may come from several threads)
  StallMonitor monitor_;

  std::mutex run_mutex_;  // one run() at a time
  // The current job. call_ and ctx_ are written before the job is published in claim_ and stay
  // unchanged until all its tasks are done, so a thread that claimed one of its tasks may read
  // them.
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  // claim_ = task count (high 32 bits) | next unclaimed task (low 32 bits). A thread claims with
  // one fetch_add; the value it gets back says whether it holds a task of the current job, so a
  // late worker can never run a task of a job that has finished, nor read a half-written job.
  alignas(64) std::atomic<std::uint64_t> claim_{0};
  alignas(64) std::atomic<std::uint32_t> done_tasks_{0};
  alignas(64) std::atomic<std::uint32_t> generation_{
      0};  // bumped per job; sleeping workers wait on it
  std::atomic<std::uint32_t> sleeping_workers_{0};
  std::atomic<std::uint32_t> caller_sleeping_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace specdec::cpu
