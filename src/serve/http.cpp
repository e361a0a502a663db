// The HTTP/1.1 server of specdec/serve/http.hpp on Boost.Beast. One Connection per socket, its
// operations serialised by a strand; the life of a request on it:
//
//   waiting   read_request(): the headers (async_read_header), checks, the body (async_read),
//             all under one deadline (Options::request_timeout)
//   handling  dispatch(): the handler runs (here, or on a thread of its own); the watcher polls
//             the socket for a client that has gone; the handler's Exchange queues the response
//   then      after_response(): the next request on a kept-alive connection, else close
//
// Writes go through one queue (out_), one async_write at a time, each under
// Options::write_timeout. What an Exchange does from another thread is posted to the strand and
// tagged with its request's serial, so that a late call of a finished exchange cannot write into
// the next response.

#include "specdec/serve/http.hpp"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "specdec/common.hpp"
#include "specdec/serve/api.hpp"

namespace specdec::serve::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
/// A connection's stream: plain TCP, or TLS over it (Options::tls_cert_file). Reads and writes go
/// through std::visit; deadlines and the socket are the TCP layer's (Connection::tcp()).
using AnyStream = std::variant<PlainStream, TlsStream>;

namespace {

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

/// Status line and headers (and the body, unless chunked) as bytes on the wire.
std::string serialize(const Response& r, const std::string& request_id, bool keep_alive,
                      bool chunked) {
  bhttp::response<bhttp::string_body> m{static_cast<bhttp::status>(r.status), 11};
  m.set(bhttp::field::server, "specdec");
  if (!r.content_type.empty()) m.set(bhttp::field::content_type, r.content_type);
  m.set("X-Request-Id", request_id);
  for (const Header& h : r.headers) m.insert(h.name, h.value);
  m.keep_alive(keep_alive);
  std::ostringstream os;
  if (chunked) {
    m.chunked(true);
    os << m.base();
  } else {
    m.body() = r.body;
    m.prepare_payload();
    os << m;
  }
  return std::move(os).str();
}

std::string chunk(std::string_view data) {
  return fmt::format("{:x}\r\n{}\r\n", data.size(), data);
}

constexpr std::string_view kLastChunk = "0\r\n\r\n";
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

std::string_view Request::header(std::string_view name) const {
  for (const Header& h : headers)
    if (equal_ignoring_case(h.name, name)) return h.value;
  return {};
}

// ================================================================================= Server::Impl

struct Server::Impl {
  Impl(Options o, Callbacks c) : options(std::move(o)), callbacks(std::move(c)) {}

  Options options;
  Callbacks callbacks;
  std::atomic<bool> draining{false}, stopping{false};
  std::atomic<std::uint64_t> next_request{1};

  // Before the io_context: the connections its handlers hold unregister here as it is destroyed.
  mutable std::mutex mutex;  // guards what follows
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> connections;
  std::uint64_t next_connection = 1;
  std::size_t handlers = 0;
  std::condition_variable handlers_changed;

  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::optional<net::ssl::context> tls;  // with Options::tls_cert_file
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  /// Runs the handler on a thread of its own; false when Options::max_handlers are running.
  bool spawn_handler(const std::shared_ptr<Exchange>& exchange);
  /// The longest-waiting connection that is only waiting for a request, closed to make room.
  bool evict_one_waiting();
  /// The connections still alive, taken under the lock (to act on them outside it).
  std::vector<std::shared_ptr<Connection>> live_connections() const {
    std::vector<std::shared_ptr<Connection>> all;
    const std::lock_guard lock(mutex);
    for (const auto& [id, weak] : connections)
      if (auto c = weak.lock()) all.push_back(std::move(c));
    return all;
  }
  void unregister(std::uint64_t id) {
    const std::lock_guard lock(mutex);
    connections.erase(id);
  }
  std::string new_request_id() { return fmt::format("req-{}", next_request.fetch_add(1)); }
};

// ================================================================================= Connection

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { waiting, handling, closed };

  Connection(Server::Impl& server, tcp::socket socket, std::uint64_t id)
      : server_(server),
        stream_(make_stream(std::move(socket), server.tls)),
        watch_timer_(tcp().get_executor()),
        id_(id) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { server_.unregister(id_); }

  void start() {
    net::dispatch(tcp().get_executor(), [self = shared_from_this()] {
      auto* tls = std::get_if<TlsStream>(&self->stream_);
      if (tls == nullptr) return self->read_request();
      // The handshake counts in the first request's time.
      self->tcp().expires_after(self->server_.options.request_timeout);
      tls->async_handshake(net::ssl::stream_base::server, [self](beast::error_code ec) {
        if (ec) return self->close();
        self->read_request();
      });
    });
  }

  /// From any thread: closes the connection if it is waiting for a request (drain, eviction).
  void close_if_waiting() {
    net::post(tcp().get_executor(), [self = shared_from_this()] {
      if (self->phase_ == Phase::waiting) self->close();
    });
  }
  void close_from_outside() {
    net::post(tcp().get_executor(), [self = shared_from_this()] { self->close(); });
  }

  [[nodiscard]] Phase phase() const { return phase_.load(); }
  [[nodiscard]] SteadyClock::time_point waiting_since() const {
    return SteadyClock::time_point(SteadyClock::duration(waiting_since_.load()));
  }

  // ---- for Exchange (any thread): posted to the strand, tagged with the exchange's serial
  void post_respond(std::uint64_t serial, std::string bytes) {
    post(serial, [bytes = std::move(bytes)](Connection& c) mutable {
      c.head_sent_ = true;
      c.enqueue(std::move(bytes), true);
    });
  }
  void post_stream_head(std::uint64_t serial, std::string bytes, bool event_stream) {
    post(serial, [bytes = std::move(bytes), event_stream](Connection& c) mutable {
      c.head_sent_ = true;
      c.event_stream_ = event_stream;
      c.enqueue(std::move(bytes), false);
    });
  }
  void post_chunk(std::uint64_t serial, std::string bytes, bool last) {
    post(serial, [bytes = std::move(bytes), last](Connection& c) mutable {
      c.enqueue(std::move(bytes), last);
    });
  }
  void post_on_gone(std::uint64_t serial, std::function<void()> f) {
    post(serial, [f = std::move(f)](Connection& c) mutable {
      if (c.gone_)
        f();
      else
        c.on_gone_ = std::move(f);
    });
  }
  [[nodiscard]] bool gone(std::uint64_t serial) const {
    return gone_flag_.load() || serial != serial_.load();
  }
  [[nodiscard]] bool keep_alive() const { return keep_alive_ && !server_.draining.load(); }
  [[nodiscard]] std::uint64_t serial() const { return serial_.load(); }
  Server::Impl& server() { return server_; }

 private:
  template <class F>
  void post(std::uint64_t serial, F f) {
    net::post(tcp().get_executor(),
              [self = shared_from_this(), serial, f = std::move(f)]() mutable {
                if (serial != self->serial_.load() || self->phase_ != Phase::handling ||
                    self->finished_ || self->gone_)
                  return;
                f(*self);
              });
  }

  // ---------------------------------------------------------------- reading a request
  void read_request() {
    phase_ = Phase::waiting;
    waiting_since_ = SteadyClock::now().time_since_epoch().count();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
    parser_->body_limit(server_.options.max_body_bytes);
    tcp().expires_after(server_.options.request_timeout);
    std::visit(
        [this](auto& stream) {
          bhttp::async_read_header(stream, buffer_, *parser_,
                                   [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                     self->on_header(ec);
                                   });
        },
        stream_);
  }

  void on_header(beast::error_code ec) {
    if (ec) return read_failed(ec);
    const auto& message = parser_->get();
    const auto field = [&message](bhttp::field name) {
      const auto value = message[name];
      return std::string_view(value.data(), value.size());
    };
    // Values quoted in errors are cut at 100 bytes (excerpt()).
    if (const auto encoding = field(bhttp::field::content_encoding);
        !encoding.empty() && !equal_ignoring_case(encoding, "identity"))
      return refuse(415, fmt::format("Content-Encoding '{}' is not accepted: send the body "
                                     "uncompressed",
                                     excerpt(encoding, 100)));
    if (const auto coding = field(bhttp::field::transfer_encoding);
        !coding.empty() && !equal_ignoring_case(coding, "chunked"))
      return refuse(501, fmt::format("Transfer-Encoding '{}' is not supported (chunked is)",
                                     excerpt(coding, 100)));
    if (parser_->is_done()) return on_body({});
    if (equal_ignoring_case(field(bhttp::field::expect), "100-continue"))
      enqueue(std::string(kContinue), false);
    std::visit(
        [this](auto& stream) {
          bhttp::async_read(
              stream, buffer_, *parser_,
              [self = shared_from_this()](beast::error_code e, std::size_t) { self->on_body(e); });
        },
        stream_);
  }

  void on_body(beast::error_code ec) {
    if (ec) return read_failed(ec);
    tcp().expires_never();
    auto message = parser_->release();
    parser_.reset();
    Request request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.path = request.target.substr(0, request.target.find('?'));
    for (const auto& field : message)
      request.headers.push_back({std::string(field.name_string()), std::string(field.value())});
    request.body = std::move(message.body());
    request.id = server_.new_request_id();
    keep_alive_ = message.keep_alive();
    http11_ = message.version() >= 11;
    dispatch(std::move(request));
  }

  /// A read that ended without a request: a client that closed between requests or sent nothing
  /// in time goes quietly; a malformed or oversized request gets its status.
  void read_failed(beast::error_code ec) {
    if (ec == bhttp::error::header_limit)
      return refuse(431, fmt::format("the request's headers exceed {} bytes",
                                     server_.options.max_header_bytes));
    if (ec == bhttp::error::body_limit)
      return refuse(
          413, fmt::format("the request body exceeds {} bytes", server_.options.max_body_bytes));
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message)
      return refuse(400, fmt::format("malformed HTTP request: {}", ec.message()));
    close();  // end of stream, timeout, reset, aborted by close()
  }

  /// A new request on this connection (one passed on, or one refused): its serial, and none of
  /// the previous one's state.
  void begin_exchange() {
    phase_ = Phase::handling;
    ++serial_;
    head_sent_ = event_stream_ = finished_ = gone_ = probed_ = false;
    gone_flag_ = false;
    on_gone_ = nullptr;
  }

  /// Answers a request the HTTP layer will not pass on, then closes the connection.
  void refuse(int status, const std::string& message) {
    tcp().expires_never();
    begin_exchange();
    keep_alive_ = false;
    const std::string id = server_.new_request_id();
    enqueue(serialize(server_.callbacks.error(status, message, id), id, false, false), true);
  }

  // ---------------------------------------------------------------- handling it
  void dispatch(Request request) {
    begin_exchange();
    const bool blocking = server_.callbacks.blocking(request);
    auto exchange = std::make_shared<Exchange>(shared_from_this(), std::move(request));
    if (!blocking) {
      try {
        server_.callbacks.handle(exchange);
      } catch (const std::exception& e) {
        exchange->respond(server_.callbacks.error(500, e.what(), exchange->request().id));
      }
      return;
    }
    if (!server_.spawn_handler(exchange)) {
      exchange->respond(
          server_.callbacks.error(429,
                                  fmt::format("the server is busy: {} requests are being handled",
                                              server_.options.max_handlers),
                                  exchange->request().id));
      return;
    }
    watch();
  }

  /// Polls the socket while the handler runs: a reset or a full hang-up is a gone client; a FIN
  /// gets a probe (see http.hpp), whose reset tells a closed socket from a half-closed one.
  void watch() {
    watch_timer_.expires_after(server_.options.watch_interval);
    watch_timer_.async_wait(
        [self = shared_from_this(), serial = serial_.load()](beast::error_code ec) {
          if (ec || serial != self->serial_.load() || self->finished_ || self->gone_ ||
              self->phase_ != Phase::handling)
            return;
          pollfd p{self->tcp().socket().native_handle(), POLLIN | POLLRDHUP, 0};
          if (::poll(&p, 1, 0) == 1) {
            if ((p.revents & (POLLERR | POLLHUP)) != 0) return self->client_gone();
            if ((p.revents & POLLRDHUP) != 0 && !self->probed_) {
              self->probed_ = true;
              self->keep_alive_ = false;  // nothing more will come on it
              if (!self->head_sent_ && self->http11_)
                self->enqueue(std::string(kContinue), false);
              else if (self->event_stream_)
                self->enqueue(chunk(":\n\n"), false);  // an SSE comment: ignored by the client
              else
                return self->client_gone();  // no probe this client must accept: take it as gone
            }
          }
          self->watch();
        });
  }

  void client_gone() {
    if (gone_) return;
    gone_ = true;
    gone_flag_ = true;
    if (on_gone_) {
      auto f = std::move(on_gone_);
      on_gone_ = nullptr;
      f();
    }
    close();
  }

  // ---------------------------------------------------------------- writing
  void enqueue(std::string bytes, bool ends_response) {
    if (phase_ == Phase::closed) return;
    out_.push_back({std::move(bytes), ends_response});
    if (!writing_) write_next();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    tcp().expires_after(server_.options.write_timeout);
    std::visit(
        [this](auto& stream) {
          net::async_write(stream, net::buffer(out_.front().bytes),
                           [self = shared_from_this()](beast::error_code ec, std::size_t) {
                             self->on_written(ec);
                           });
        },
        stream_);
  }

  void on_written(beast::error_code ec) {
    if (ec) {
      out_.clear();
      writing_ = false;
      if (phase_ == Phase::handling && !finished_) return client_gone();
      return close();
    }
    const bool ended = out_.front().ends_response;
    out_.pop_front();
    if (ended) return after_response();
    write_next();
  }

  void after_response() {
    finished_ = true;
    watch_timer_.cancel();
    out_.clear();  // a probe queued behind the response: nothing to send any more
    writing_ = false;
    if (keep_alive_ && !server_.draining.load() && !server_.stopping.load()) return read_request();
    linger_close();
  }

  /// Closes after a last response: the write side first, then what the client still sends is
  /// read and dropped for a moment, so that a response to a request whose body was not read
  /// (413) reaches the client instead of being cut by a reset.
  void linger_close() {
    phase_ = Phase::closed;
    tcp().expires_after(std::chrono::seconds(2));
    if (auto* tls = std::get_if<TlsStream>(&stream_)) {  // close_notify, then the socket
      tls->async_shutdown([self = shared_from_this()](beast::error_code) { self->close(); });
      return;
    }
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    drain_input();
  }
  void drain_input() {
    tcp().async_read_some(net::buffer(scratch_),
                          [self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) return self->close();
                            self->drain_input();
                          });
  }

  void close() {
    phase_ = Phase::closed;
    watch_timer_.cancel();
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
    tcp().socket().close(ignored);
    if (!gone_ && on_gone_) client_gone();
  }

  struct Pending {
    std::string bytes;
    bool ends_response = false;
  };

  static AnyStream make_stream(tcp::socket socket, std::optional<net::ssl::context>& tls) {
    if (tls) return AnyStream(std::in_place_type<TlsStream>, std::move(socket), *tls);
    return AnyStream(std::in_place_type<PlainStream>, std::move(socket));
  }
  beast::tcp_stream& tcp() {
    return std::visit(
        [](auto& stream) -> beast::tcp_stream& { return beast::get_lowest_layer(stream); },
        stream_);
  }

  Server::Impl& server_;
  AnyStream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::deque<Pending> out_;
  bool writing_ = false;
  net::steady_timer watch_timer_;
  std::array<char, 4096> scratch_{};
  const std::uint64_t id_;

  std::atomic<Phase> phase_{Phase::waiting};
  std::atomic<SteadyClock::rep> waiting_since_{0};
  std::atomic<std::uint64_t> serial_{0};  // of the request being handled
  std::atomic<bool> gone_flag_{false};    // gone_, readable from any thread

  // the request being handled (strand only)
  std::atomic<bool> keep_alive_{false};  // read by Exchange on the handler's thread
  bool http11_ = true;
  bool head_sent_ = false, event_stream_ = false, finished_ = false, gone_ = false;
  bool probed_ = false;
  std::function<void()> on_gone_;
};

// ================================================================================= Exchange

Exchange::Exchange(std::shared_ptr<Connection> connection, Request request)
    : connection_(std::move(connection)), request_(std::move(request)) {
  serial_ = connection_->serial();
}

Exchange::~Exchange() {
  if (!answered_) {
    if (connection_->gone(serial_)) return;  // nobody to answer (a cancelled request)
    respond(connection_->server().callbacks.error(500, "the request got no response", request_.id));
  } else if (streaming_ && !ended_) {
    end();
  }
}

void Exchange::respond(const Response& response) {
  if (answered_) return;
  answered_ = true;
  connection_->post_respond(serial_,
                            serialize(response, request_.id, connection_->keep_alive(), false));
}

void Exchange::start_stream(const Response& head) {
  if (answered_) return;
  answered_ = true;
  streaming_ = true;
  const bool event_stream = head.content_type.starts_with("text/event-stream");
  connection_->post_stream_head(
      serial_, serialize(head, request_.id, connection_->keep_alive(), true), event_stream);
}

bool Exchange::write(std::string_view data) {
  if (!streaming_ || ended_ || connection_->gone(serial_)) return false;
  if (!data.empty()) connection_->post_chunk(serial_, chunk(data), false);
  return true;
}

void Exchange::end() {
  if (!streaming_ || ended_) return;
  ended_ = true;
  connection_->post_chunk(serial_, std::string(kLastChunk), true);
}

void Exchange::on_client_gone(std::function<void()> f) {
  connection_->post_on_gone(serial_, std::move(f));
}

bool Exchange::client_gone() const { return connection_->gone(serial_); }

// ================================================================================= Server

void Server::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void Server::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (!ec) {
    std::size_t open = 0;
    {
      const std::lock_guard lock(mutex);
      open = connections.size();
    }
    if (open >= options.max_connections && !evict_one_waiting()) {
      beast::error_code ignored;
      socket.close(ignored);  // every connection is busy with a request: no room
    } else {
      std::shared_ptr<Connection> c;
      {
        const std::lock_guard lock(mutex);
        const std::uint64_t id = next_connection++;
        c = std::make_shared<Connection>(*this, std::move(socket), id);
        connections.emplace(id, c);
      }
      c->start();
    }
  }
  if (!draining.load() && !stopping.load()) accept();
}

bool Server::Impl::evict_one_waiting() {
  std::shared_ptr<Connection> oldest;
  for (auto& c : live_connections())
    if (c->phase() == Connection::Phase::waiting &&
        (!oldest || c->waiting_since() < oldest->waiting_since()))
      oldest = std::move(c);
  if (!oldest) return false;
  oldest->close_if_waiting();
  return true;
}

bool Server::Impl::spawn_handler(const std::shared_ptr<Exchange>& exchange) {
  {
    const std::lock_guard lock(mutex);
    if (handlers >= options.max_handlers) return false;
    ++handlers;
  }
  std::thread([this, exchange = exchange]() mutable {
    try {
      callbacks.handle(exchange);
    } catch (const std::exception& e) {
      exchange->respond(callbacks.error(500, e.what(), exchange->request().id));
    }
    exchange.reset();  // before the count drops: the Server may be destroyed right after
    const std::lock_guard lock(mutex);
    --handlers;
    handlers_changed.notify_all();
  }).detach();
  return true;
}

Server::Server(Options options, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(callbacks))) {}

Server::~Server() {
  stop();
  std::unique_lock lock(impl_->mutex);
  impl_->handlers_changed.wait(lock, [this] { return impl_->handlers == 0; });
}

int Server::listen() {
  Impl& s = *impl_;
  // Each connection is a file descriptor: as many as the hard limit allows, some left over.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
      getrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur > 128)
      s.options.max_connections =
          std::min<std::size_t>(s.options.max_connections, files.rlim_cur - 64);
  }
  if (!s.options.tls_cert_file.empty()) {
    s.tls.emplace(net::ssl::context::tls_server);
    s.tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                       net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1);  // TLS 1.2 and 1.3
    const auto load = [](const char* flag, const std::string& file, const auto& use) {
      try {
        use(file);
      } catch (const boost::system::system_error& e) {
        throw Error(fmt::format("serve: {} {}: {}", flag, file, e.code().message()));
      }
    };
    load("--ssl-cert-file", s.options.tls_cert_file,
         [&s](const std::string& f) { s.tls->use_certificate_chain_file(f); });
    load("--ssl-key-file", s.options.tls_key_file,
         [&s](const std::string& f) { s.tls->use_private_key_file(f, net::ssl::context::pem); });
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(s.options.host, ec);
  if (ec)
    throw Error(
        fmt::format("serve: --host {}: not an IP address ({})", s.options.host, ec.message()));
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
  const auto fail = [&](const char* what) {
    throw Error(fmt::format("serve: cannot {} {}:{}: {}{}", what, s.options.host, s.options.port,
                            ec.message(),
                            ec == net::error::address_in_use ? " (is the port in use?)" : ""));
  };
  s.acceptor.open(endpoint.protocol(), ec);
  if (ec) fail("open a socket for");
  s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) fail("set SO_REUSEADDR on");
  s.acceptor.bind(endpoint, ec);
  if (ec) fail("listen on");
  s.acceptor.listen(s.options.listen_backlog, ec);
  if (ec) fail("listen on");
  return s.acceptor.local_endpoint().port();
}

void Server::run() {
  Impl& s = *impl_;
  s.work.emplace(s.ioc.get_executor());
  net::post(s.acceptor.get_executor(), [&s] { s.accept(); });
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < std::max<std::size_t>(1, s.options.io_threads); ++i)
    threads.emplace_back([&s] { s.ioc.run(); });
  for (std::thread& t : threads) t.join();
  std::unique_lock lock(s.mutex);
  s.handlers_changed.wait(lock, [&s] { return s.handlers == 0; });
}

void Server::drain() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  net::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
  });
  for (const auto& c : s.live_connections()) c->close_if_waiting();
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  drain();
  for (const auto& c : s.live_connections()) c->close_from_outside();
  s.work.reset();
  s.ioc.stop();
}

bool Server::wait_idle(std::chrono::milliseconds bound) {
  const auto deadline = SteadyClock::now() + bound;
  for (;;) {
    const auto all = impl_->live_connections();
    const bool busy =
        running_handlers() > 0 || std::any_of(all.begin(), all.end(), [](const auto& c) {
          return c->phase() == Connection::Phase::handling;
        });
    if (!busy) return true;
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::size_t Server::open_connections() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->connections.size();
}

std::size_t Server::running_handlers() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->handlers;
}

}  // namespace specdec::serve::http
