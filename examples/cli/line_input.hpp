#pragma once
// The user's messages in specdec chat: lines of stdin, read so that a stop signal while waiting
// is seen at once (stdin is polled beside interrupt_fd(), never read by a blocking call that
// SA_RESTART would resume).
//
// On a terminal the line is edited with libedit (BSD-licensed, Debian's libedit-dev), through
// its readline-compatible callback interface: arrows, Home/End, word moves and deletion, and the
// history of this chat's messages (Up/Down). The callback interface lets the poll above stay in
// charge, so Ctrl-C, SIGTERM and SIGHUP keep their meaning at the prompt. Piped input is read
// as it is, without echo or editing.

#include <string>

namespace specdec::cli {

class LineInput {
 public:
  enum class Status { line, end, interrupted };

  /// `prompt` and `continuation` are shown before a message's first line and before each
  /// line that continues it (on a terminal only; libedit's \1...\2 marks invisible bytes).
  LineInput(std::string prompt, std::string continuation);
  LineInput(const LineInput&) = delete;
  LineInput& operator=(const LineInput&) = delete;
  ~LineInput();

  /// The next message: one line, or several joined when a line ends with a backslash (as in
  /// llama.cpp's interactive mode). A final "\r" (CRLF input) is dropped.
  Status next(std::string& message);

  /// Whether lines are edited (stdin is a terminal).
  [[nodiscard]] bool editing() const { return editing_; }

 private:
  Status next_line(std::string& line, const std::string& prompt);
  Status read_raw(std::string& line);
  Status read_edited(std::string& line, const std::string& prompt);

  std::string prompt_;
  std::string continuation_;
  bool editing_;
  std::string buffer_;  // piped input read but not yet returned
  bool ended_ = false;
};

}  // namespace specdec::cli
