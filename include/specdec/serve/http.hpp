#pragma once
// The HTTP/1.1 layer of `specdec serve`: a server on Boost.Beast (asynchronous sockets on a few
// I/O threads), with the limits a shared machine needs and that cpp-httplib 0.11 (Debian 12's)
// lacks. docs/serve.md ("The HTTP layer") says why Beast and what each limit is.
//
//   - Connections cost no thread while they send their request: a slow or silent client holds a
//     socket, never a thread, so /health answers whatever they do. Each request has one deadline
//     for its headers and body together (a byte a second does not extend it).
//   - A body is limited after its transfer decoding (chunked bodies count their decoded bytes);
//     compressed bodies (Content-Encoding) are refused with 415, not inflated.
//   - At most Options::max_connections sockets: a new connection beyond it closes the one that has
//     waited longest for a request (as nginx reuses idle keep-alive connections).
//   - Requests on a connection are answered in order (pipelining), and a client that half-closes
//     its side after its request still gets the answer.
//   - TLS when Options::tls_cert_file is set.
//   - While a handler runs, the connection is watched: a client that has closed its socket is
//     reported through Exchange::on_client_gone within Options::watch_interval, so that a
//     generation nobody will read is stopped. A FIN alone does not say whether the client closed
//     or only half-closed; the watcher then sends a probe the client must accept (an interim
//     `100 Continue` before the response, an SSE comment inside an event stream): a closed socket
//     answers it with a reset, a half-closed one takes it.
//
// Threads: run() runs the I/O threads; handlers of requests that block (Callbacks::blocking: a
// generation) run on a thread of their own, at most Options::max_handlers at once; the others
// run on an I/O thread and must be quick (/health, /metrics). A handler answers through its
// Exchange from any thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::serve::http {

struct Header {
  std::string name, value;
};

struct Request {
  std::string method;  ///< "GET", "POST", ...
  std::string target;  ///< as sent: path and query
  std::string path;    ///< the target without its query
  std::vector<Header> headers;
  std::string body;  ///< decoded from its transfer encoding
  std::string id;    ///< "req-N", sent back as X-Request-Id
  /// The first header of that name (case-insensitive), "" when there is none.
  [[nodiscard]] std::string_view header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<Header> headers;  ///< besides Content-Type, Content-Length and X-Request-Id
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;                ///< 0: any free port (listen() returns it)
  std::size_t io_threads = 2;     ///< threads that read and write every socket
  std::size_t max_handlers = 64;  ///< blocking handlers at once; more get Callbacks::error(429)
  std::size_t max_connections = 1024;  ///< lowered to what RLIMIT_NOFILE allows
  std::size_t max_header_bytes = std::size_t{64} << 10;
  std::size_t max_body_bytes = std::size_t{16} << 20;
  /// A request's headers and body must arrive within this, counted from when the server starts
  /// waiting for it (the connection's accept, or the end of the previous response); an idle
  /// keep-alive connection is closed after it too.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};  ///< each write
  std::chrono::milliseconds watch_interval{
      50};  ///< how often a running request's client is checked
  int listen_backlog = 512;
  /// TLS (1.2 and 1.3, OpenSSL through Boost.Asio) when set: a PEM certificate chain and its
  /// private key. Every connection then speaks HTTPS; its handshake counts in request_timeout.
  std::string tls_cert_file, tls_key_file;
};

class Connection;

/// One request and its response. Shared by the connection and the handler; every method may be
/// called from any thread. A response is either respond() or start_stream(), write()..., end().
/// An Exchange dropped without a response answers 500 (a handler bug must not hang a client).
class Exchange {
 public:
  Exchange(std::shared_ptr<Connection> connection, Request request);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange();

  [[nodiscard]] const Request& request() const { return request_; }

  void respond(const Response& response);
  /// A chunked response: the status and headers now, the body as write() gives it.
  void start_stream(const Response& head);
  /// Queues a piece of a streamed body; false once the client is gone (nothing more is sent).
  bool write(std::string_view data);
  void end();

  /// f runs once, on an I/O thread, when the client is found gone before the response was
  /// written (at once if it already is).
  void on_client_gone(std::function<void()> f);
  [[nodiscard]] bool client_gone() const;

 private:
  std::shared_ptr<Connection> connection_;
  Request request_;
  std::uint64_t serial_ = 0;  // the connection's count of its requests, this one's
  // Set by the one thread that answers (the handler's):
  bool answered_ = false;  // respond() or start_stream() was called
  bool streaming_ = false, ended_ = false;
};

struct Callbacks {
  /// Answers a request (on an I/O thread, or on a thread of its own when blocking() says so).
  std::function<void(const std::shared_ptr<Exchange>&)> handle;
  /// Whether handle() may block for long (it then gets a thread of its own).
  std::function<bool(const Request&)> blocking;
  /// The response for what the HTTP layer refuses by itself: 400 malformed, 413 body too large,
  /// 415 compressed body, 431 headers too large, 429 no handler thread free. request_id is the
  /// X-Request-Id the response will carry.
  std::function<Response(int status, const std::string& message, const std::string& request_id)>
      error;
};

class Server {
 public:
  Server(Options options, Callbacks callbacks);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

  /// Binds and listens (SO_REUSEADDR, not SO_REUSEPORT: a second server on the port fails);
  /// returns the port. Throws specdec::Error naming the address when it cannot.
  int listen();
  /// Runs the I/O threads until stop(); returns once they and every handler thread have ended.
  void run();
  /// Stops accepting, closes the connections waiting for a request, and answers the running
  /// ones with "Connection: close".
  void drain();
  /// Waits until no request is being handled or answered (after drain(): until the last answers
  /// are written), at most `bound`; whether it got there.
  bool wait_idle(std::chrono::milliseconds bound);
  /// Closes every connection; run() returns once the handler threads have returned.
  void stop();

  [[nodiscard]] std::size_t open_connections() const;
  [[nodiscard]] std::size_t running_handlers() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::serve::http
