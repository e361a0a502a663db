#pragma once
// The real `specdec serve` in a child process on a free loopback port, and HTTP helpers for
// driving it (cpp-httplib's client, and curl): what the server tests share.
//
// Every wait is bounded (kPatience): a server that hangs fails the test, it never hangs it.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "specdec_test.hpp"

namespace specdec::test {

inline constexpr auto kPatience = std::chrono::seconds(120);

/// -c of the usual server, and of the `specdec generate` runs its answers are compared to.
inline const std::string kContext = "1024";

/// The usual server's arguments: the demo pair, ChatML for the chat endpoint, then `extra`.
inline std::vector<std::string> pair_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"-m",     demo_target(),     "-md",   demo_draft(), "-c",
                                   kContext, "--chat-template", "chatml"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// `specdec serve --host 127.0.0.1 --port 0 ARGS...` (the program `cli`, SPECDEC_CLI by
/// default), started by the constructor, which returns once /health answers 200; stderr goes to
/// a file (err()).
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args, std::string cli = SPECDEC_CLI)
      : err_path_(temp_path(".server.err")) {
    std::vector<std::string> all = {cli, "serve", "--host", "127.0.0.1", "--port", "0"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      signal(SIGINT, SIG_DFL);  // Catch2's handlers must not run in the child
      signal(SIGTERM, SIG_DFL);
      const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int null = open("/dev/null", O_RDWR);
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      close(err);
      close(null);
      execv(all[0].c_str(), argv.data());
      _exit(127);
    }
    // The port it bound, from "listening on http://127.0.0.1:PORT" (or https://).
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    std::size_t at = std::string::npos;
    std::string text;
    std::string_view listening;
    for (;;) {
      text = err();
      for (const std::string_view l :
           {"listening on http://127.0.0.1:", "listening on https://127.0.0.1:"}) {
        if (const auto found = text.find(l); found != std::string::npos) {
          at = found;
          listening = l;
        }
      }
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) break;
      INFO(text);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      REQUIRE(running());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    port_ = std::stoi(text.substr(at + listening.size()));
    https_ = listening.find("https") != std::string_view::npos;
    while (!https_) {  // (an HTTPS server is asked by its test, with curl)
      httplib::Client c("127.0.0.1", port_);
      if (const auto r = c.Get("/health"); r && r->status == 200) break;
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove(err_path_);
  }

  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] std::string err() const { return read_file(err_path_); }
  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(kPatience);
    c.set_write_timeout(std::chrono::seconds(10));
    return c;
  }

  bool running() {
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return false;
    }
    return true;
  }
  /// Sends `sig` (unless 0) and waits for the exit: its status, -1 if a signal ended it, -2 if it
  /// did not end within kPatience.
  int stop(int sig = SIGTERM) {
    if (sig != 0 && running()) kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) return -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return status_;
  }

 private:
  std::filesystem::path err_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int status_ = -1;
  bool https_ = false;
};

/// POST a JSON body; the status and the body (parsed when it is JSON, else a string).
struct HttpReply {
  int status = 0;
  std::string body;
  nlohmann::json json;  ///< null unless the body is JSON
  httplib::Headers headers;
};
inline HttpReply post(const ServerProcess& s, const std::string& path, const std::string& body,
                      const httplib::Headers& headers = {}) {
  httplib::Client c = s.client();
  const auto r = c.Post(path.c_str(), headers, body, "application/json");
  HttpReply reply;
  if (!r) return reply;  // status 0: no answer
  reply.status = r->status;
  reply.body = r->body;
  reply.headers = r->headers;
  reply.json = nlohmann::json::parse(r->body, nullptr, false);
  if (reply.json.is_discarded()) reply.json = nullptr;
  return reply;
}
inline HttpReply get(const ServerProcess& s, const std::string& path,
                     const httplib::Headers& headers = {}) {
  httplib::Client c = s.client();
  const auto r = c.Get(path.c_str(), headers);
  HttpReply reply;
  if (!r) return reply;
  reply.status = r->status;
  reply.body = r->body;
  reply.headers = r->headers;
  reply.json = nlohmann::json::parse(r->body, nullptr, false);
  if (reply.json.is_discarded()) reply.json = nullptr;
  return reply;
}

/// The JSON objects of a server-sent event stream ("data: {...}" lines), and whether it ended
/// with "data: [DONE]".
struct Events {
  std::vector<nlohmann::json> data;
  bool done = false;
};
inline Events parse_sse(const std::string& text) {
  Events e;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find("\n\n", at);
    if (end == std::string::npos) end = text.size();
    const std::string event = text.substr(at, end - at);
    at = end + 2;
    if (event.rfind("data: ", 0) != 0) continue;
    const std::string payload = event.substr(6);
    if (payload == "[DONE]") {
      e.done = true;
      continue;
    }
    e.data.push_back(nlohmann::json::parse(payload));
  }
  return e;
}

/// A streamed POST read by `on_data` (which returns false to hang up, as a client that goes
/// away). Returns the bytes received.
inline std::string post_stream(const ServerProcess& s, const std::string& path,
                               const std::string& body,
                               const std::function<bool(const std::string& so_far)>& on_data = {}) {
  httplib::Client c = s.client();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string received;
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    received.append(data, n);
    return on_data ? on_data(received) : true;
  };
  (void)c.send(req);
  return received;
}

/// The value of a sample in /metrics text ("name{labels}" exactly as printed), or -1.
inline double metric(const std::string& text, const std::string& sample) {
  const std::string key = sample + " ";
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1))
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + key.size()));
  return -1;
}

/// Polls until pred() holds (true) or kPatience passes (false).
inline bool eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace specdec::test
