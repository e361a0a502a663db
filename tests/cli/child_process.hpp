#pragma once
// The CLI running in a child process, for the tests that signal it or talk to it: stdout into a
// pipe, stderr into a file, stdin from a pipe the test holds open (to write to it, or so that
// "-f -" blocks) or /dev/null. Every wait is bounded (a hung child is killed and the test fails).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec_test.hpp"

namespace specdec::test {

inline constexpr auto kPatience = std::chrono::seconds(120);  // far beyond any wait

class Child {
 public:
  /// Runs `program args...` (SPECDEC_CLI by default).
  Child(const std::vector<std::string>& args, bool hold_stdin,
        const std::string& program = SPECDEC_CLI)
      : program_(program), err_path_(temp_path(".err")) {
    int out[2], in[2];
    REQUIRE(pipe(out) == 0);
    REQUIRE(pipe(in) == 0);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program_.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (const int sig : {SIGINT, SIGTERM, SIGHUP})  // Catch2's handlers must not run there
        signal(sig, SIG_DFL);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = open("/dev/null", O_RDONLY);
      dup2(out[1], STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      dup2(hold_stdin ? in[0] : null, STDIN_FILENO);
      for (const int fd : {out[0], out[1], in[0], in[1], err, null}) close(fd);
      execv(program_.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    close(in[0]);
    out_ = out[0];
    in_ = in[1];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
    if (in_ >= 0) close(in_);
    std::filesystem::remove(err_path_);
  }

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::string err() const { return read_file(err_path_); }
  [[nodiscard]] const std::string& out() const { return out_text_; }

  /// Writes to the child's stdin (which must be held).
  void write_stdin(const std::string& text) {
    REQUIRE(in_ >= 0);
    REQUIRE(::write(in_, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  }
  /// Closes the child's stdin: it reads the end of its input.
  void close_stdin() {
    if (in_ >= 0) close(in_);
    in_ = -1;
  }

  /// Reads stdout until at least `bytes` arrived; false on EOF or when patience runs out.
  bool read_at_least(std::size_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (out_text_.size() < bytes) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(out_, buffer, sizeof buffer);
      if (n <= 0) return false;
      out_text_.append(buffer, static_cast<std::size_t>(n));
    }
    return true;
  }

  /// Reads what stdout holds now, without waiting (what the child wrote before a line it then
  /// wrote to stderr is all there once that line is seen).
  void drain_stdout() {
    for (pollfd p{out_, POLLIN, 0}; poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;) {
      char buffer[4096];
      const ssize_t n = read(out_, buffer, sizeof buffer);
      if (n <= 0) return;
      out_text_.append(buffer, static_cast<std::size_t>(n));
    }
  }

  /// Waits until stderr contains `text` `count` times.
  bool wait_for_err(const std::string& text, std::size_t count = 1) const {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (occurrences(err(), text) < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  /// Whether the CLI (after exec: before it, the forked copy of this test still runs Catch2's
  /// handlers) has installed a handler for `sig` (/proc/PID/status, SigCgt).
  [[nodiscard]] bool catches_sigint(int sig = SIGINT) const {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid_) + "/exe", ec);
    if (ec || !std::filesystem::equivalent(exe, program_, ec)) return false;
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigCgt:", 0) == 0)
        return (std::stoull(line.substr(7), nullptr, 16) & (1ull << (sig - 1))) != 0;
    return false;
  }

  /// Reads stdout to its end and waits for the exit status (-1: did not exit normally).
  int finish() {
    (void)read_at_least(static_cast<std::size_t>(-1));  // to EOF
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  static std::size_t occurrences(const std::string& haystack, const std::string& needle) {
    std::size_t n = 0;
    for (auto at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + needle.size()))
      ++n;
    return n;
  }

 private:
  std::string program_;
  std::filesystem::path err_path_;
  pid_t pid_ = -1;
  int out_ = -1;
  int in_ = -1;
  bool exited_ = false;
  std::string out_text_;
};

}  // namespace specdec::test
