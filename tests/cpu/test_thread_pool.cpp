// ThreadPool: every task runs exactly once, thread indices are in range, runs from several
// threads are serialised, the pool shuts down cleanly whether its workers sleep or spin, and a
// pool whose threads cannot all be started throws a specdec::Error instead of terminating.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "specdec/common.hpp"
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

TEST_CASE("a slow task delays only its own run: other threads take the rest", "[cpu][pool]") {
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

TEST_CASE("a pool whose threads cannot start throws a specdec::Error naming the count",
          "[cpu][pool]") {
  // In a child process, an address-space limit 64 MiB above what the process already uses leaves
  // room for a few thread stacks (8 MiB each by default), not for 1023. RLIMIT_AS binds root too
  // (RLIMIT_NPROC does not, and CI runs as root). Before the fix the constructor unwound with
  // running std::threads: std::terminate, "terminate called without an active exception".
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::string message = "no exception";
    std::size_t statm_pages = 0;
    std::ifstream("/proc/self/statm") >> statm_pages;
    const auto in_use = static_cast<rlim_t>(statm_pages * static_cast<std::size_t>(getpagesize()));
    const rlimit limit{in_use + (rlim_t{64} << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &limit) != 0) {
      message = "setrlimit failed";
    } else {
      try {
        ThreadPool pool(1024);
      } catch (const specdec::Error& e) {
        message = e.what();
      } catch (...) {
        message = "an exception other than specdec::Error";
      }
    }
    const ssize_t written = write(fds[1], message.data(), message.size());
    _exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;)
    message.append(buffer, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO(message);
  REQUIRE(WIFEXITED(status));  // not killed by std::terminate's abort
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(message.find("ThreadPool: cannot start thread ") == 0);
  CHECK(message.find(" of 1024: Resource temporarily unavailable") != std::string::npos);

  // The parent's pools still work (nothing global was left half-built).
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  pool.run(8, [&](std::size_t, std::size_t) { ran.fetch_add(1); });
  CHECK(ran.load() == 8);
}
