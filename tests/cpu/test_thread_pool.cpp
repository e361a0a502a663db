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

TEST_CASE("StallMonitor: stalled windows send the pool solo, with a doubling back-off",
          "[cpu][pool]") {
  using specdec::cpu::StallMonitor;
  StallMonitor m(
      {.window = 4, .max_stall_fraction = 0.2, .solo_windows = 2, .max_solo_windows = 8});
  auto window = [&](double stall) {
    for (int i = 0; i < 4; ++i) m.record(1.0, stall);
  };
  // Quiet: small stalls (10% of the time) never switch.
  for (int w = 0; w < 10; ++w) window(0.1);
  CHECK(m.parallel());
  CHECK(m.solo_periods() == 0);
  // One stalled window (30% > 20%): solo for 2 windows of 4 runs.
  window(0.3);
  CHECK_FALSE(m.parallel());
  for (int i = 0; i < 7; ++i) {
    m.record(0, 0);
    CHECK_FALSE(m.parallel());
  }
  m.record(0, 0);
  CHECK(m.parallel());
  CHECK(m.solo_periods() == 1);
  // The trial window stalls again: back-off doubles to 4 windows (16 runs), then 8, capped at 8.
  for (std::size_t expected : {16, 32, 32}) {
    window(0.5);
    std::size_t solo = 0;
    while (!m.parallel()) {
      m.record(0, 0);
      ++solo;
    }
    CHECK(solo == expected);
  }
  // A clean trial window resets the back-off to 2 windows.
  window(0.0);
  window(0.5);
  std::size_t solo = 0;
  while (!m.parallel()) {
    m.record(0, 0);
    ++solo;
  }
  CHECK(solo == 8);
}

TEST_CASE("a pool whose worker keeps stalling runs solo and still runs every task once",
          "[cpu][pool]") {
  ThreadPool pool(2);
  // Every task takes 50 us (so that the worker gets some), and thread 1 also sleeps 2 ms in each
  // of its tasks, as if preempted: the caller waits for it most of each run, and the pool must
  // fall back to solo runs.
  std::atomic<long> total{0};
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> runs(8);
    pool.run(8, [&](std::size_t task, std::size_t thread) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (std::chrono::steady_clock::now() < until) {
      }
      if (thread == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      runs[task].fetch_add(1);
      total += 1;
    });
    for (auto& r : runs) REQUIRE(r.load() == 1);
  }
  CHECK(total == 200 * 8);
  CHECK(pool.solo_periods() >= 1);
}
