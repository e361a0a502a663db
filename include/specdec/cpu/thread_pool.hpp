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
//    they hold tasks — the user of the pool can run a call on the calling thread alone
//    (run(..., false)); ParallelismChooser decides that from measured times (the CPU
//    Transformer keeps one per kind of step). Which thread runs a task never changes its result,
//    so neither does the choice.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace specdec::cpu {

/// Chooses, call by call, whether a kind of parallel call (say, a decode step) should use the
/// pool's workers or the calling thread alone, from the wall times it measured for both. On a
/// quiet machine the workers win and are used; when a competing process keeps preempting them,
/// waiting for them can cost more than they add, and the calling thread alone wins. The chooser
/// uses the mode with the lower running estimate (exponential average of recent times) and tries
/// the other one every `probe_interval` calls (`far_probe_interval` when the other one was more
/// than `far_ratio` slower), so it follows a machine whose load changes, at a small cost: a probe
/// of the slower mode every 64 calls. Plain arithmetic, no clock: the caller feeds the times.
class ParallelismChooser {
 public:
  struct Options {
    double weight = 0.1;  ///< of a new time in the running estimate
    std::size_t probe_interval = 16;
    std::size_t far_probe_interval = 64;
    double far_ratio = 1.15;
  };
  ParallelismChooser() : ParallelismChooser(Options{}) {}
  explicit ParallelismChooser(Options options) : options_(options) {}

  /// Whether the next call should use the workers. The first call uses them, the second does
  /// not, so that both estimates exist.
  [[nodiscard]] bool use_workers() const noexcept {
    if (seen_[1] == 0) return true;
    if (seen_[0] == 0) return false;
    const bool workers_better = estimate_[1] <= estimate_[0];
    const double slow = workers_better ? estimate_[0] : estimate_[1];
    const double fast = workers_better ? estimate_[1] : estimate_[0];
    const std::size_t interval =
        slow > options_.far_ratio * fast ? options_.far_probe_interval : options_.probe_interval;
    const bool probe = since_probe_ + 1 >= interval;
    return probe ? !workers_better : workers_better;
  }

  /// Records the wall time of a call made in mode `workers`.
  void record(bool workers, double seconds) noexcept {
    const bool probe = workers != (estimate_[1] <= estimate_[0]) && seen_[0] && seen_[1];
    double& e = estimate_[workers ? 1 : 0];
    e = seen_[workers ? 1 : 0]++ == 0 ? seconds
                                      : (1 - options_.weight) * e + options_.weight * seconds;
    since_probe_ = probe ? 0 : since_probe_ + 1;
  }

  [[nodiscard]] std::size_t calls(bool workers) const noexcept { return seen_[workers ? 1 : 0]; }

 private:
  Options options_;
  double estimate_[2] = {0, 0};  // [solo, workers]
  std::size_t seen_[2] = {0, 0};
  std::size_t since_probe_ = 0;
};

class ThreadPool {
 public:
  /// threads >= 1: the caller plus threads - 1 workers. Throws specdec::Error naming the thread
  /// that could not be started and why (after joining those that were), e.g. under a memory
  /// limit that leaves no room for their stacks.
  explicit ThreadPool(std::size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

  /// Runs fn(task, thread) for every task in [0, tasks) and returns when all are done. `thread`
  /// in [0, size()) names the thread running the task (for per-thread scratch); the caller is 0.
  /// fn must not throw. Calls from several threads at once are serialised. use_workers = false
  /// runs every task on the calling thread (thread 0).
  template <class F>
  void run(std::size_t tasks, F&& fn, bool use_workers = true) {
    if (tasks == 0) return;
    if (tasks == 1 || workers_.empty() || !use_workers) {
      for (std::size_t i = 0; i < tasks; ++i) fn(i, std::size_t{0});
      return;
    }
    run_erased(
        tasks,
        [](void* ctx, std::size_t task, std::size_t thread) {
          (*static_cast<std::remove_reference_t<F>*>(ctx))(task, thread);
        },
        &fn);
  }

  /// One pool per thread count for the whole process, shared by every Transformer that asks for
  /// that count (a draft and a target alternate on the same workers instead of competing).
  static std::shared_ptr<ThreadPool> shared(std::size_t threads);

 private:
  using Call = void (*)(void*, std::size_t, std::size_t);
  void run_erased(std::size_t tasks, Call call, void* ctx);
  void worker_main(std::size_t index);
  void stop_workers() noexcept;  ///< wakes, stops and joins every worker

  void work(std::size_t thread);

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
