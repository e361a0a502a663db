#include "line_input.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <editline/readline.h>
#include <fmt/format.h>

#include "common.hpp"
#include "specdec/common.hpp"

namespace specdec::cli {

namespace {

// libedit's callback interface hands the line to a C function: it lands here.
std::optional<std::string> g_line;  // the line, once its Enter was read
bool g_end = false;                 // Ctrl-D on an empty line
bool g_done = false;

extern "C" void on_line(char* line) {
  g_done = true;
  if (line == nullptr) {
    g_end = true;
    return;
  }
  g_line = line;
  std::free(line);  // NOLINT(cppcoreguidelines-no-malloc): libedit allocated it with malloc
}

/// Waits until stdin has input (true) or a stop signal arrived (false).
bool wait_for_input() {
  for (;;) {
    if (interrupted()) return false;
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    const int ready = ::poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1);
    if (ready < 0 && errno != EINTR)
      throw Error(fmt::format("stdin: poll failed: {}", std::strerror(errno)));
    if (interrupted()) return false;
    if (ready > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) return true;
  }
}

}  // namespace

LineInput::LineInput(std::string prompt, std::string continuation)
    : prompt_(std::move(prompt)),
      continuation_(std::move(continuation)),
      editing_(isatty(STDIN_FILENO) != 0 && isatty(STDOUT_FILENO) != 0) {
  if (!editing_) return;
  rl_catch_signals = 0;  // the command's own handlers stay (common.hpp, InterruptHandler)
  rl_instream = stdin;
  rl_outstream = stdout;
  using_history();
}

LineInput::~LineInput() {
  if (editing_) clear_history();
}

LineInput::Status LineInput::next(std::string& message) {
  message.clear();
  for (std::string line;;) {
    const Status status = next_line(line, message.empty() ? prompt_ : continuation_);
    if (status != Status::line) return message.empty() ? status : Status::line;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    message += line;
    if (editing_ && message.find_first_not_of(" \t\r\n") != std::string::npos)
      add_history(message.c_str());
    return Status::line;
  }
}

LineInput::Status LineInput::next_line(std::string& line, const std::string& prompt) {
  return editing_ ? read_edited(line, prompt) : read_raw(line);
}

LineInput::Status LineInput::read_edited(std::string& line, const std::string& prompt) {
  flush_stdout();
  g_line.reset();
  g_end = g_done = false;
  rl_callback_handler_install(prompt.c_str(), on_line);
  for (;;) {
    if (!wait_for_input()) {
      rl_callback_handler_remove();  // the terminal as it was
      write_stdout("\n");
      return Status::interrupted;
    }
    rl_callback_read_char();
    if (!g_done) continue;
    rl_callback_handler_remove();
    if (g_end) {
      write_stdout("\n");  // Ctrl-D leaves the cursor after the prompt
      return Status::end;
    }
    line = std::move(*g_line);
    return Status::line;
  }
}

LineInput::Status LineInput::read_raw(std::string& line) {
  for (;;) {
    if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
      line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return Status::line;
    }
    if (ended_) {
      if (buffer_.empty()) return Status::end;
      line = std::exchange(buffer_, {});  // a last line without its newline
      return Status::line;
    }
    if (!wait_for_input()) return Status::interrupted;
    char chunk[4096];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("stdin: read failed: {}", std::strerror(errno)));
    if (n == 0) ended_ = true;
    buffer_.append(chunk, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  }
}

}  // namespace specdec::cli
