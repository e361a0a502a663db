// ThreadPool: every task runs exactly once, thread indices are in range, runs from several
// threads are serialised, and the pool shuts down cleanly whether its workers sleep or spin.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "specdec/cpu/thread_pool.hpp"
#include "specdec_test.hpp"

using specdec::cpu::ThreadPool;

TEST_CASE("every task runs once, on a valid thread", "[cpu][pool]") {
  for (std::size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    REQUIRE(pool.size() == threads);
    for (std::size_t tasks : {0, 1, 2, 7, 100, 1000}) {
      std::vector<std::atomic<int>> runs(tasks);
      std::atomic<bool> bad_thread{false};
      pool.run(tasks, [&](std::size_t task, std::size_t thread) {
        runs[task].fetch_add(1);
        if (thread >= threads) bad_thread = true;
      });
      for (std::size_t i = 0; i < tasks; ++i) REQUIRE(runs[i].load() == 1);
      CHECK_FALSE(bad_thread);
    }
  }
}

TEST_CASE("many short runs back to back, and after the workers fell asleep", "[cpu][pool]") {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  for (int round = 0; round < 2000; ++round)
    pool.run(3, [&](std::size_t task, std::size_t) { total += task; });
  CHECK(total == 2000 * 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers stop spinning and sleep
  pool.run(4, [&](std::size_t, std::size_t) { total += 1; });
  CHECK(total == 2000 * 3 + 4);
}

TEST_CASE("a slow task delays only its own run; other threads take the rest", "[cpu][pool]") {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.run(50, [&](std::size_t task, std::size_t) {
    if (task == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done += 1;
  });
  CHECK(done == 50);
}

TEST_CASE("runs from several threads are serialised", "[cpu][pool]") {
  auto pool = ThreadPool::shared(2);
  CHECK(ThreadPool::shared(2) == pool);
  std::atomic<int> inside{0}, max_inside{0};
  std::atomic<long> total{0};
  auto body = [&] {
    for (int i = 0; i < 200; ++i)
      pool->run(4, [&](std::size_t, std::size_t) {
        total += 1;
        (void)inside;
        (void)max_inside;
      });
  };
  std::thread a(body), b(body);
  a.join();
  b.join();
  CHECK(total == 2 * 200 * 4);
}

TEST_CASE("run(..., false) runs every task on the calling thread", "[cpu][pool]") {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::vector<int> runs(64, 0);  // no atomics needed: one thread
  bool elsewhere = false;
  pool.run(
      64,
      [&](std::size_t task, std::size_t thread) {
        runs[task] += 1;
        elsewhere = elsewhere || thread != 0 || std::this_thread::get_id() != caller;
      },
      false);
  CHECK_FALSE(elsewhere);
  for (int r : runs) CHECK(r == 1);
}

TEST_CASE("ParallelismChooser: tries both modes, keeps the faster, probes the other",
          "[cpu][pool]") {
  using specdec::cpu::ParallelismChooser;
  ParallelismChooser c(
      {.weight = 0.5, .probe_interval = 4, .far_probe_interval = 10, .far_ratio = 1.3});
  // A machine where the calling thread alone takes 10 ms and the workers 6 ms (quiet).
  auto call = [&](double alone, double workers) {
    const bool w = c.use_workers();
    c.record(w, w ? workers : alone);
    return w;
  };
  CHECK(call(10, 6));        // first: workers
  CHECK_FALSE(call(10, 6));  // second: alone, so that both are measured
  // 10 > 1.3 * 6: the slower mode is probed once every 10 calls.
  std::size_t alone = 0;
  for (int i = 0; i < 100; ++i) alone += !call(10, 6);
  CHECK(alone == 10);
  // A neighbour arrives: the workers now take 14 ms. The next probe of the calling thread alone
  // (10 ms) reveals it, and the choice flips within a few calls; then workers are probed.
  std::size_t workers = 0;
  for (int i = 0; i < 20; ++i) call(10, 14);
  for (int i = 0; i < 100; ++i) workers += call(10, 14);
  CHECK(c.use_workers() == false);
  CHECK(workers <= 10);
  // Close times (within far_ratio): the other mode is probed every 4 calls.
  ParallelismChooser d(
      {.weight = 0.5, .probe_interval = 4, .far_probe_interval = 10, .far_ratio = 1.5});
  std::size_t probes = 0;
  for (int i = 0; i < 102; ++i) {
    const bool w = d.use_workers();
    d.record(w, w ? 9.0 : 10.0);
    if (i >= 2) probes += !w;
  }
  CHECK(probes == 25);
  CHECK(d.calls(true) + d.calls(false) == 102);
}
