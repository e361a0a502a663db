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
//    which hands their CPU to the thread they are waiting for.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace specdec::cpu {

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
    if (tasks == 1 || workers_.empty()) {
      for (std::size_t i = 0; i < tasks; ++i) fn(i, std::size_t{0});
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

 private:
  using Call = void (*)(void*, std::size_t, std::size_t);
  void run_erased(std::size_t tasks, Call call, void* ctx);
  void worker_main(std::size_t index);
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
