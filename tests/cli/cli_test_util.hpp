#pragma once
// Running the specdec binary from the tests: arguments in, exit status and both streams out.

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specdec::test {

/// The CLI's default backend is CUDA where a GPU is present; these tests expect the CPU backend
/// (test_backend*.cpp ask for cuda explicitly). An SPECDEC_BACKEND already set is kept.
inline const bool kCpuBackendByDefault = ::setenv("SPECDEC_BACKEND", "cpu", 0) == 0;

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
/// not terminals: no progress lines, no colours) and stdin from `input` (else /dev/null).
inline RunResult run_program(const std::string& program, const std::vector<std::string>& args,
                             const std::optional<std::string>& input = std::nullopt) {
  const auto out = temp_path(".out"), err = temp_path(".err"), in = temp_path(".in");
  std::string cmd = shell_quote(program);
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" >")
      .append(shell_quote(out.string()))
      .append(" 2>")
      .append(shell_quote(err.string()));
  if (input) {
    std::ofstream(in, std::ios::binary) << *input;
    cmd.append(" <").append(shell_quote(in.string()));
  } else {
    cmd.append(" </dev/null");
  }
  const int raw = std::system(cmd.c_str());
  RunResult r;
  r.status = raw != -1 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  std::filesystem::remove(in);
  return r;
}

inline RunResult run_cli(const std::vector<std::string>& args,
                         const std::optional<std::string>& input = std::nullopt) {
  return run_program(SPECDEC_CLI, args, input);
}

/// Runs `specdec args...` from /bin/sh with `redirect` appended (e.g. "> /dev/full"); stdout and
/// stderr as the shell leaves them are captured as in run_program.
inline RunResult run_cli_redirected(const std::vector<std::string>& args,
                                    const std::string& redirect) {
  std::string cmd = "exec " + shell_quote(SPECDEC_CLI);
  for (const auto& a : args) cmd.append(" ").append(shell_quote(a));
  cmd.append(" ").append(redirect);
  return run_program("/bin/sh", {"-c", cmd});
}

/// A copy of a GGUF file with the uint32 metadata value of `key` replaced, in the temp folder
/// (the caller removes it). Throws when the key is not a uint32 of the file.
inline std::filesystem::path patched_gguf(const std::string& source, const std::string& key,
                                          std::uint32_t value) {
  std::string bytes = read_file(source);
  // A GGUF key-value pair: u64 key length, the key, u32 type (4 = UINT32), the value.
  const auto at = bytes.find(key);
  if (at == std::string::npos || at + key.size() + 8 > bytes.size())
    throw std::runtime_error(key + " not found in " + source);
  std::uint32_t type = 0;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  if (type != 4) throw std::runtime_error(key + " is not a uint32 in " + source);
  std::memcpy(bytes.data() + at + key.size() + 4, &value, 4);
  const auto path = temp_path(".gguf");
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
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
