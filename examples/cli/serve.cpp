// specdec serve: an OpenAI-compatible HTTP server with speculative decoding.
//
//   specdec serve -m TARGET [-md DRAFT | --ngram N | --baseline] [--host 127.0.0.1] [--port 8080]
//                 [-c N] [-np P] [--queue Q] [--alias NAME] [--chat-template NAME] [-k 4] ...
//
//   POST /v1/completions, POST /v1/chat/completions   (streamed with server-sent events or not)
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text format)
//
// The layers: serve/api.* parses requests and builds responses (OpenAI's objects), serve/engine.*
// runs the slots (one thread, BatchedRounds), serve/metrics.* counts; this file is the HTTP layer
// (cpp-httplib) between them, the flags and the shutdown. docs/serve.md documents all of it.
//
// Threads: the engine thread (models, rounds); httplib's pool of HTTP threads (parse, tokenize,
// wait for a job's text, write it); one thread waiting for SIGINT/SIGTERM, which are blocked in
// every other thread. The first signal drains: new requests get 503, the admitted ones finish,
// then the server stops and the process exits 0. A second signal cancels what is still running.

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <CLI/CLI.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/serve/api.hpp"
#include "specdec/serve/engine.hpp"
#include "specdec/serve/metrics.hpp"

namespace specdec::cli {

namespace {

using nlohmann::json;
using serve::ApiError;
using serve::Endpoint;

struct ServeOptions : DecodeFlags {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::size_t parallel = 4;
  std::size_t queue = 16;
  std::optional<std::string> alias;
  std::optional<std::string> chat_template;
  ModelFlags models;
  BackendFlag backend;
  std::size_t http_threads = 0;
  bool verbose = false;
  bool no_batching = false;
  std::vector<std::string> api_keys;        ///< --api-key (repeatable, or comma-separated)
  std::optional<std::string> api_key_file;  ///< one key per line
  std::optional<int> timeout;               ///< --timeout (-to): read and write timeout, seconds
};

/// Everything the HTTP handlers need, read-only once the server listens (the engine and the
/// metrics are thread-safe).
struct Server {
  std::string model_name;
  std::string target_path, draft_path;
  DecodeSetup setup;
  const Tokenizer* tokenizer = nullptr;
  std::size_t context_length = 0;
  std::size_t vocab_size = 0;      ///< the target's, for the token ids of logit_bias
  Backend backend = Backend::cpu;  ///< the backend the slots run on
  /// What the slots' sampler can do (PenaltySampler, LogprobSampler of the backend's sampler):
  /// requests that need more are refused with a 400.
  bool sampler_penalties = true, sampler_logprobs = true;
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_error;  ///< why there is none, for the 400 of chat requests
  std::vector<token_t> end_of_turn_tokens;
  std::int64_t created = 0;
  std::size_t slots = 0;
  std::unique_ptr<serve::Metrics> metrics;
  std::unique_ptr<serve::Engine> engine;
  std::atomic<bool> draining{false};
  std::atomic<std::size_t> in_flight{0};  ///< completion responses not yet fully written
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<std::uint64_t> next_request{1};  ///< X-Request-Id of every HTTP request
  std::vector<std::string> api_keys;           ///< empty: no authentication
};

// ------------------------------------------------------------------------ authentication

/// a == b in a time that depends on their lengths only, not on where they differ (a key compared
/// byte by byte with an early exit leaks its prefix through response times).
bool equal_in_constant_time(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

/// Whether the request carries one of the keys as the OpenAI clients send it
/// ("Authorization: Bearer KEY"). Every key is compared, so the time does not say which matched.
bool authorised(const Server& s, const httplib::Request& req) {
  constexpr std::string_view kBearer = "Bearer ";
  const std::string header = req.get_header_value("Authorization");
  if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0)
    return false;
  const std::string_view key = std::string_view(header).substr(kBearer.size());
  bool match = false;
  for (const std::string& k : s.api_keys) match = equal_in_constant_time(key, k) || match;
  return match;
}

/// The routes anyone may read with --api-key set (llama-server's public endpoints).
bool is_public(const std::string& path) { return path == "/health" || path == "/v1/models"; }

/// --api-key and the lines of --api-key-file (blank lines and surrounding spaces ignored).
std::vector<std::string> read_api_keys(const ServeOptions& o) {
  std::vector<std::string> keys;
  const auto add = [&keys](std::string_view text, const std::string& source) {
    const auto first = text.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return;
    const auto last = text.find_last_not_of(" \t\r");
    const std::string key(text.substr(first, last - first + 1));
    if (key.find_first_of(" \t") != std::string::npos)
      throw UsageError(fmt::format("serve: {}: an API key has no spaces", source));
    keys.push_back(key);
  };
  for (const std::string& flag : o.api_keys) {
    std::string_view rest = flag;
    for (;;) {  // llama-server takes comma-separated keys in one flag
      const auto comma = rest.find(',');
      add(rest.substr(0, comma), "--api-key");
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (o.api_key_file) {
    const std::string text = read_text_file(*o.api_key_file);
    std::string_view rest = text;
    while (!rest.empty()) {
      const auto newline = rest.find('\n');
      add(rest.substr(0, newline), "--api-key-file " + *o.api_key_file);
      if (newline == std::string_view::npos) break;
      rest.remove_prefix(newline + 1);
    }
    if (keys.empty())
      throw UsageError(fmt::format("serve: --api-key-file {} holds no key", *o.api_key_file));
  }
  if (!o.api_keys.empty() && keys.empty()) throw UsageError("serve: --api-key is empty");
  return keys;
}

// ------------------------------------------------------------------------ helpers

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n",
                  "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status, serve::error_json(e));
}

/// The route's name in the metrics.
std::string endpoint_label(const std::string& path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat_completions";
  if (path == "/v1/models") return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

std::uint64_t random_seed() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) | device();
}

/// The prompt's token ids: a text prompt tokenized as `specdec generate` does (BOS as the model
/// wants), token ids checked against the vocabulary, a conversation rendered with the chat
/// template. Refuses a prompt that leaves no room to generate.
std::vector<token_t> prompt_tokens(const Server& s, const serve::CompletionRequest& r) {
  std::vector<token_t> ids;
  if (r.endpoint == Endpoint::chat_completions) {
    if (!s.chat_template)
      throw ApiError(400, s.chat_template_error, "messages", "no_chat_template");
    std::string text;
    try {
      text = s.chat_template->render(r.messages, true);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "messages");
    }
    ids = tokenize_chat(*s.tokenizer, text, true);
  } else if (r.prompt_ids) {
    for (const std::int64_t id : *r.prompt_ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= s.tokenizer->vocab_size())
        throw ApiError(400,
                       fmt::format("'prompt' holds token id {}, outside the vocabulary [0, {})", id,
                                   s.tokenizer->vocab_size()),
                       "prompt");
      ids.push_back(static_cast<token_t>(id));
    }
  } else {
    ids = s.tokenizer->encode(r.prompt, true);
  }
  if (ids.empty()) throw ApiError(400, "the prompt has no tokens", "prompt");
  if (ids.size() >= s.context_length)
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens but the context holds {} positions (at "
                               "most {} prompt tokens leave room to generate; the server's -c "
                               "sets the context)",
                               ids.size(), s.context_length, s.context_length - 1),
                   r.endpoint == Endpoint::chat_completions ? "messages" : "prompt",
                   "context_length_exceeded");
  return ids;
}

GenerationConfig generation_config(const Server& s, const serve::CompletionRequest& r) {
  GenerationConfig c;
  c.max_new_tokens = r.max_tokens ? static_cast<std::size_t>(*r.max_tokens)
                                  : std::numeric_limits<std::size_t>::max();
  c.sampling = r.sampling;
  c.penalties = r.penalties;
  if ((c.penalties.active() && !s.sampler_penalties) || (r.logprobs && !s.sampler_logprobs))
    throw ApiError(400,
                   "presence_penalty, frequency_penalty, logit_bias and logprobs are served on the "
                   "CPU backend only (this server runs on CUDA: start it with --backend cpu)",
                   c.penalties.active() && !s.sampler_penalties ? "presence_penalty" : "logprobs",
                   "unsupported_on_backend");
  try {
    sampling::validate(c.penalties, s.vocab_size);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "logit_bias");  // the one field checked against the model
  }
  c.seed = r.seed ? *r.seed : random_seed();
  if (r.logprobs) {
    c.logprobs = true;
    c.top_logprobs = *r.logprobs;
  }
  c.stop_strings = r.stop;
  c.stop_at_eos = !r.ignore_eos;
  if (r.endpoint == Endpoint::chat_completions) {
    // The end of the assistant's turn ends the answer: as a token when the tokenizer has it as
    // one, else as text.
    c.stop_tokens = s.end_of_turn_tokens;
    for (const std::string& marker : s.chat_template->end_of_turn())
      if (std::find(c.stop_strings.begin(), c.stop_strings.end(), marker) == c.stop_strings.end())
        c.stop_strings.push_back(marker);
  }
  return c;
}

/// The extension block of a response: the request's speculative statistics.
json speculative_json(const Server& s, const serve::Job& job) {
  json j = stats_json(job.result().stats);
  j["drafter"] = s.setup.label();
  j["seed"] = job.config.seed;
  j["stop_reason"] = std::string(to_string(job.result().stop_reason));
  const auto end = job.finished_at.value_or(serve::Clock::now());
  j["queue_seconds"] =
      std::chrono::duration<double>(job.started.value_or(end) - job.submitted).count();
  return j;
}

// ------------------------------------------------------------------------ completions

/// Decrements Server::in_flight when the response is done (written or abandoned).
struct InFlight {
  explicit InFlight(Server& s) : server(&s) { ++s.in_flight; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { --server->in_flight; }
  Server* server;
};

/// What a streamed response keeps between calls of its content provider.
struct Stream {
  std::shared_ptr<serve::Job> job;
  serve::ResponseInfo info;
  bool include_usage = false;
  bool logprobs = false;        ///< the request asked for them: every chunk carries its tokens'
  std::size_t text_offset = 0;  ///< completions' text_offset: the text streamed so far
  bool first = true;
  std::shared_ptr<InFlight> in_flight;
};

void handle_completion(Server& s, const httplib::Request& req, httplib::Response& res,
                       Endpoint endpoint) {
  auto in_flight = std::make_shared<InFlight>(s);
  if (s.draining.load())
    throw ApiError(503, "the server is shutting down", "", "server_draining", "server_error");
  const serve::CompletionRequest r = serve::parse_request(req.body, endpoint, s.model_name);
  std::vector<token_t> ids = prompt_tokens(s, r);
  const std::size_t prompt_size = ids.size();
  auto job = std::make_shared<serve::Job>(std::move(ids), generation_config(s, r));
  switch (s.engine->submit(job)) {
    case serve::Engine::Admission::accepted:
      break;
    case serve::Engine::Admission::queue_full:
      throw ApiError(
          429,
          fmt::format("the server is busy: {} requests are running or waiting (--parallel "
                      "and --queue); try again later",
                      s.engine->load().busy + s.engine->load().queued),
          "", "rate_limit_exceeded", "rate_limit_error");
    case serve::Engine::Admission::draining:
      throw ApiError(503, "the server is shutting down", "", "server_draining", "server_error");
  }
  serve::ResponseInfo info;
  info.id = fmt::format("{}-{:x}", endpoint == Endpoint::chat_completions ? "chatcmpl" : "cmpl",
                        s.next_id.fetch_add(1));
  info.created = static_cast<std::int64_t>(std::time(nullptr));
  info.model = s.model_name;
  info.endpoint = endpoint;

  if (!r.stream) {
    job->wait_finished();
    if (!job->error().empty())
      throw ApiError(500, job->error(), "", "generation_failed", "server_error");
    const GenerationResult& result = job->result();
    send_json(res, 200,
              serve::response_json(
                  info, result.text, result.stop_reason,
                  serve::usage_json(prompt_size, result.tokens.size()), speculative_json(s, *job),
                  r.logprobs ? serve::logprobs_json(endpoint, *s.tokenizer, result.logprobs)
                             : json(nullptr)));
    return;
  }

  auto stream = std::make_shared<Stream>();
  stream->job = job;
  stream->info = info;
  stream->include_usage = r.include_usage;
  stream->logprobs = r.logprobs.has_value();
  stream->in_flight = in_flight;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&s, stream, prompt_size](std::size_t, httplib::DataSink& sink) {
        serve::Job& job = *stream->job;
        std::string out;
        if (stream->first && stream->info.endpoint == Endpoint::chat_completions) {
          // OpenAI's first chunk of a chat stream: the role, no content yet.
          json chunk = serve::chunk_json(stream->info, "", true, std::nullopt);
          chunk["choices"][0]["delta"]["content"] = "";
          out += serve::sse_event(chunk);
          stream->first = false;
        }
        const serve::Job::Update update = job.wait(std::chrono::milliseconds(100));
        // A chunk's logprobs: those of its tokens (null when the request asked for none); the
        // completions' text_offset goes on past them.
        const auto logprobs = [&](std::span<const sampling::TokenLogprob> lps) {
          if (!stream->logprobs) return json(nullptr);
          json j =
              serve::logprobs_json(stream->info.endpoint, *s.tokenizer, lps, stream->text_offset);
          for (const auto& lp : lps)
            stream->text_offset += s.tokenizer->token_bytes(lp.token).size();
          return j;
        };
        for (const serve::Job::Piece& piece : update.pieces) {
          out += serve::sse_event(serve::chunk_json(stream->info, piece.text, stream->first, {},
                                                    nullptr, logprobs(piece.logprobs)));
          stream->first = false;
        }
        if (update.finished) {
          if (!job.error().empty()) {
            out += serve::sse_event(serve::error_json(
                ApiError(500, job.error(), "", "generation_failed", "server_error")));
          } else {
            const GenerationResult& result = job.result();
            // The tokens that released no text (a stop string's) come with the last chunk.
            out += serve::sse_event(serve::chunk_json(
                stream->info, "", stream->first, result.stop_reason, speculative_json(s, job),
                update.trailing.empty() ? json(nullptr) : logprobs(update.trailing)));
            if (stream->include_usage)
              out += serve::sse_event(serve::usage_chunk_json(
                  stream->info, serve::usage_json(prompt_size, result.tokens.size())));
          }
          out += "data: [DONE]\n\n";
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          job.cancel();  // the client is gone: the engine frees the slot before its next round
          return false;
        }
        if (update.finished) sink.done();
        return true;
      },
      [stream](bool success) {
        if (!success) stream->job->cancel();
        stream->in_flight.reset();
      });
}

// ------------------------------------------------------------------------ the server

void add_routes(httplib::Server& http, Server& s) {
  auto guarded = [&s](Endpoint endpoint) {
    return [&s, endpoint](const httplib::Request& req, httplib::Response& res) {
      try {
        handle_completion(s, req, res, endpoint);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, e.what(), "", "internal_error", "server_error"));
      }
    };
  };
  http.Post("/v1/completions", guarded(Endpoint::completions));
  http.Post("/v1/chat/completions", guarded(Endpoint::chat_completions));
  for (const char* path : {"/v1/completions", "/v1/chat/completions"})
    http.Get(path, [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, ApiError(405, fmt::format("{} takes POST requests", req.path), "",
                               "method_not_allowed"));
    });

  http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    // File names only: the server's directories are nobody's business.
    json meta = {{"target", std::filesystem::path(s.target_path).filename().string()},
                 {"drafter", s.setup.label()},
                 {"context_length", s.context_length},
                 {"slots", s.slots},
                 {"chat_template",
                  s.chat_template ? json(std::string(s.chat_template->name())) : json(nullptr)}};
    if (!s.draft_path.empty())
      meta["draft"] = std::filesystem::path(s.draft_path).filename().string();
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", s.model_name},
                                      {"object", "model"},
                                      {"created", s.created},
                                      {"owned_by", "specdec"},
                                      {"meta", meta}}})}});
  });
  http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    const serve::Engine::Load load = s.engine->load();
    const bool draining = load.draining || s.draining.load();
    send_json(res, draining ? 503 : 200,
              {{"status", draining ? "draining" : "ok"},
               {"slots_idle", load.slots - load.busy},
               {"slots_processing", load.busy},
               {"queued", load.queued}});
  });
  http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics->render(), "text/plain; version=0.0.4; charset=utf-8");
  });

  // Whatever httplib answers by itself (404 unknown route, 413 body too large, 400 a malformed
  // request line) gets an OpenAI-style body too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message =
        res.status == 404 ? fmt::format("no route {} {} (see docs/serve.md)", req.method, req.path)
        : res.status == 413 ? std::string("the request body is too large")
                            : fmt::format("HTTP status {}", res.status);
    send_json(res, res.status,
              serve::error_json(ApiError(res.status, message, "",
                                         res.status == 404 ? "not_found" : "invalid_request")));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, const std::exception_ptr& error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "", "internal_error", "server_error"));
      });
}

/// Waits for SIGINT / SIGTERM (blocked in every thread, so only this one receives them): the
/// first drains and stops the server, a second cancels what is still running.
void watch_signals(Server& s, httplib::Server& http, const std::atomic<bool>& listen_returned) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signals = 0;
  std::thread drainer;
  for (;;) {
    const timespec tick{0, 100'000'000};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (listen_returned.load()) break;
    if (sig != SIGINT && sig != SIGTERM) continue;
    if (++signals == 1) {
      const serve::Engine::Load load = s.engine->load();
      fmt::print(stderr,
                 "specdec serve: {}: draining ({} running, {} queued; new requests get 503; "
                 "send it again to cancel them)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", load.busy, load.queued);
      s.draining.store(true);
      s.engine->drain();
      drainer = std::thread([&s, &http, &listen_returned] {
        s.engine->join();
        // Let the last responses be written (a stuck client gets 30 s).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (s.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        while (!listen_returned.load()) {  // stop() is a no-op until listening has begun
          http.stop();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      });
    } else if (signals == 2) {
      fmt::print(stderr, "specdec serve: cancelling the requests still running\n");
      s.engine->cancel_all();
    }
  }
  if (drainer.joinable()) drainer.join();
}

/// Refuses slots whose KV caches do not fit together on the CPU, before allocating any.
void check_slots_memory(const LoadedModel& target, const cpu::Options& target_options,
                        const LoadedModel* draft, const cpu::Options& draft_options,
                        std::size_t slots) {
  const auto bytes = [](const LoadedModel& m, const cpu::Options& o) {
    return cpu::Transformer::estimate_memory(m.config, o).total();
  };
  const std::size_t per_slot =
      bytes(target, target_options) + (draft ? bytes(*draft, draft_options) : 0);
  const std::size_t total = per_slot * slots;
  if (const auto available = cpu::available_memory(); available && total > available->bytes)
    throw Error(fmt::format(
        "{} slots need {} of KV cache ({} each: target {} positions{}) but {} allows {}: give "
        "fewer slots (--parallel) or a shorter context (-c N)",
        slots, cpu::format_bytes(total), cpu::format_bytes(per_slot), target_options.context_length,
        draft ? fmt::format(", draft {} positions", draft_options.context_length) : "",
        available->limit, cpu::format_bytes(available->bytes)));
}

/// Listens until SIGINT / SIGTERM, then stops the engine.
void listen_and_serve(const ServeOptions& o, Server& s) {
  s.created = static_cast<std::int64_t>(std::time(nullptr));

  httplib::Server http;
  // One HTTP thread per request that can be running or queued, and some for /health, /metrics
  // and the requests refused with 429 (a streaming request holds its thread until it ends).
  const std::size_t threads = o.http_threads != 0 ? o.http_threads : o.parallel + o.queue + 8;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(std::size_t{16} << 20);
  http.set_keep_alive_timeout(5);
  if (o.timeout) {
    http.set_read_timeout(*o.timeout);
    http.set_write_timeout(*o.timeout);
  }
  // Before routing: every request gets an id (X-Request-Id, named in the log of a 5xx), and with
  // --api-key a request without a valid key gets a 401 (OpenAI's error; the public routes
  // excepted).
  http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    res.set_header("X-Request-Id", fmt::format("req-{}", s.next_request.fetch_add(1)));
    if (s.api_keys.empty() || is_public(req.path) || authorised(s, req))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, ApiError(401,
                             "invalid or missing API key: send it as 'Authorization: Bearer KEY' "
                             "(the OpenAI clients' api_key)",
                             "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Counted before the response is written (httplib calls the post-routing handler for every
  // response, just before its status line), so that a client that reads /metrics right after
  // its answer finds it counted; the logger runs only after the body has been sent. A 429 says
  // when to come back; every 5xx is logged with its request id.
  http.set_post_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    s.metrics->http_request(endpoint_label(req.path), res.status);
    if (res.status == 429) res.set_header("Retry-After", "1");
    if (res.status >= 500)
      fmt::print(stderr, "specdec serve: {} {} {} -> {}: {}\n",
                 res.get_header_value("X-Request-Id"), req.method, req.path, res.status,
                 serve::excerpt(res.body, 500));
  });
  if (o.verbose)
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      fmt::print(stderr, "specdec serve: {} {} -> {}\n", req.method, req.path, res.status);
    });
  add_routes(http, s);

  // The listening socket, set up here rather than by httplib 0.11, which sets SO_REUSEPORT (a
  // second server on the same port then shares it silently instead of failing) and listens with
  // a backlog of 5 (a burst of connections waits for SYN retransmits, a second or more). Here:
  // SO_REUSEADDR only, and the backlog raised once httplib has bound and listened (on Linux a
  // second listen() sets the backlog of a listening socket).
  int listen_fd = -1;
  http.set_socket_options([&listen_fd](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  int port = o.port;
  if (port == 0) {
    port = http.bind_to_any_port(o.host);
    if (port < 0) throw Error(fmt::format("serve: cannot listen on {} (any port)", o.host));
  } else if (!http.bind_to_port(o.host, port)) {
    throw Error(fmt::format("serve: cannot listen on {}:{} (is the port in use?)", o.host, port));
  }
  constexpr int kListenBacklog = 512;
  if (listen_fd < 0 || ::listen(listen_fd, kListenBacklog) != 0)
    warn(fmt::format("serve: could not raise the listen backlog to {}", kListenBacklog));
  fmt::print(stderr,
             "specdec serve: {} ({}), {} slots on the {} backend, listening on http://{}:{}\n",
             s.model_name, s.setup.label(), o.parallel, backend_name(s.backend), o.host, port);
  std::fflush(stderr);

  std::atomic<bool> listen_returned{false};
  std::thread signals([&] { watch_signals(s, http, listen_returned); });
  const bool ok = http.listen_after_bind();
  listen_returned.store(true);
  signals.join();
  s.engine->cancel_all();
  s.engine->join();
  if (!ok && !s.draining.load()) throw Error("serve: the HTTP server stopped unexpectedly");
  fmt::print(stderr, "specdec serve: stopped\n");
}

/// The models on backend LM (loaded once; each slot makes its own target and draft model over
/// them), the chat template, the engine; then listen(). The models outlive the engine.
template <class LM>
void serve_on(const ServeOptions& o, Server& s) {
  s.sampler_penalties = PenaltySampler<sampler_for_t<LM>>;
  s.sampler_logprobs = LogprobSampler<sampler_for_t<LM>>;
  Model<LM> target = open_model<LM>(o.target, "target");
  std::optional<Model<LM>> draft;
  if (s.setup.uses_draft_model()) {
    draft = open_model<LM>(*o.draft, "draft");
    s.draft_path = *o.draft;
    check_draft_compatible(target.file, draft->file);
  }
  s.tokenizer = &target.tokenizer();
  s.model_name = o.alias ? *o.alias : std::filesystem::path(o.target).stem().string();
  try {
    s.chat_template = ChatTemplate::for_model(target.file, o.chat_template);
    s.end_of_turn_tokens = end_of_turn_tokens(*s.chat_template, *s.tokenizer);
  } catch (const Error& e) {
    if (o.chat_template) throw UsageError(fmt::format("--chat-template: {}", e.what()));
    s.chat_template_error = fmt::format(
        "this server has no chat template: {} (start it with --chat-template NAME)", e.what());
    warn(fmt::format("/v1/chat/completions is off: {}", e.what()));
  }

  const auto target_options =
      backend_options(std::type_identity<LM>{}, target.file, target.role, o.models);
  const auto draft_options =
      draft ? backend_options(std::type_identity<LM>{}, draft->file, draft->role, o.models)
            : decltype(target_options){};
  if constexpr (std::is_same_v<LM, cpu::Transformer>)
    check_slots_memory(target.file, target_options, draft ? &draft->file : nullptr, draft_options,
                       o.parallel);
  serve::SlotModels<LM> models;
  models.make_target = [&file = target.file, target_options] {
    return std::make_unique<LM>(file, target_options);
  };
  if (draft)
    models.make_draft = [&file = draft->file, draft_options] {
      return std::make_unique<LM>(file, draft_options);
    };
  models.tokenizer = s.tokenizer;
  models.draft_tokenizer = draft ? draft->file.tokenizer.get() : nullptr;
  s.context_length = target_options.context_length;
  s.vocab_size = target.file.config.vocab_size;
  s.metrics = std::make_unique<serve::Metrics>(o.parallel, o.queue);
  {
    Progress progress;
    progress.update(fmt::format("starting {} slots on the {} backend ...", o.parallel,
                                backend_name(s.backend)));
    s.engine =
        serve::make_engine(models, s.setup, {o.parallel, o.queue, !o.no_batching}, *s.metrics);
  }
  listen_and_serve(o, s);
  s.engine.reset();  // before the models it reads
}

void run_serve(const ServeOptions& o) {
  const DecodeSetup setup = decode_setup_of(o, "serve");
  if (o.parallel == 0) throw UsageError("serve: --parallel must be at least 1");
  (void)o.models.kv_type();

  // Signals: blocked from here on in this thread and every thread it starts (the engine's, the
  // CPU backend's pool, httplib's); watch_signals() takes them with sigtimedwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hung up is a failed write, not the end of us

  Server s;
  s.api_keys = read_api_keys(o);
  s.setup = setup;
  s.slots = o.parallel;
  s.target_path = o.target;
  s.backend = o.backend.resolve();
  on_backend(s.backend, [&]<class LM>(std::type_identity<LM>) { serve_on<LM>(o, s); });
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  add_decode_flags(*cmd, *o,
                   {"target model (the output has its distribution): a .gguf file or a Hugging "
                    "Face folder",
                    "target-only decoding (the default when no -md or --ngram is given)"});
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: any free port, printed on stderr)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o->parallel,
                  "slots: requests decoded together, their rounds batched (-np)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  cmd->add_option("--queue", o->queue,
                  "requests that may wait for a slot; more get 429 (0: none wait)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{4096}))
      ->capture_default_str();
  cmd->add_option("-a,--alias", o->alias,
                  "the model name clients use (default: the target's file name without .gguf)");
  cmd->add_option("--chat-template", o->chat_template,
                  "chat template family for /v1/chat/completions (default: the model's own): "
                  "chatml, llama3, llama3.1, llama2, mistral, gemma, phi3, zephyr");
  add_model_flags(*cmd, o->models, true);
  add_backend_flag(*cmd, o->backend);
  cmd->add_option("--threads-http", o->http_threads,
                  "HTTP threads (default: --parallel + --queue + 8)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{4096}));
  cmd->add_flag("-v,--verbose", o->verbose, "log every HTTP request on stderr");
  cmd->add_option("--api-key", o->api_keys,
                  "require 'Authorization: Bearer KEY' (the OpenAI clients' api_key) on every "
                  "route but /health and /v1/models; repeatable or comma-separated")
      ->type_name("KEY");
  cmd->add_option("--api-key-file", o->api_key_file, "API keys, one per line (as --api-key)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--timeout", o->timeout,
                  "seconds a read or a write of a connection may take (default: 5)")
      ->check(CLI::Range(1, 86400));
  cmd->add_flag("--no-batching", o->no_batching,
                "run the slots' rounds one after the other instead of batched (to measure what "
                "batching gains; the tokens are the same)");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace specdec::cli
