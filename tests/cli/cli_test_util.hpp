#pragma once
// Running the specdec binary from the tests: arguments in, exit status and both streams out.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specdec::test {

struct RunResult {
  int status = -1;  ///< exit status (-1: did not exit normally)
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// A fresh path in the temp folder, unique within the process and across processes.
inline std::filesystem::path temp_path(const std::string& suffix) {
  static std::atomic<int> counter{0};
  // Concatenation by append: GCC 12 warns (-Wrestrict, a false positive) on
  // "literal" + std::string&& in optimised builds.
  std::string name = "specdec-cli-test-";
  name.append(std::to_string(::getpid()))
      .append("-")
      .append(std::to_string(counter++))
      .append(suffix);
  return std::filesystem::temp_directory_path() / name;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `program args...` through the shell with stdout and stderr captured in files (so they are
/// not terminals: no progress lines, no colours).
inline RunResult run_program(const std::string& program, const std::vector<std::string>& args) {
  const auto out = temp_path(".out"), err = temp_path(".err");
  std::string cmd = shell_quote(program);
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >")
      .append(shell_quote(out.string()))
      .append(" 2>")
      .append(shell_quote(err.string()));
  cmd.append(" </dev/null");
  const int raw = std::system(cmd.c_str());
  RunResult r;
  r.status = raw != -1 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

inline RunResult run_cli(const std::vector<std::string>& args) {
  return run_program(SPECDEC_CLI, args);
}

inline std::string demo_model(const char* name) {
  return (std::filesystem::path(SPECDEC_DEMO_MODELS) / name).string();
}
inline std::string demo_target() { return demo_model("target-q8_0.gguf"); }
inline std::string demo_draft() { return demo_model("draft-q8_0.gguf"); }

/// stdout of a successful `specdec ... --json` run, parsed.
inline nlohmann::json parse_json_output(const RunResult& r) { return nlohmann::json::parse(r.out); }

inline std::size_t count_lines(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

}  // namespace specdec::test
