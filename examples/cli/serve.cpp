// specdec serve: an OpenAI-compatible HTTP server with speculative decoding.
//
//   specdec serve -m TARGET [-md DRAFT | --ngram N | --baseline] [--host 127.0.0.1] [--port 8080]
//                 [-c N] [-np P] [--queue Q] [--alias NAME] [--chat-template NAME] [-k 4] ...
//
//   POST /v1/completions, POST /v1/chat/completions   (streamed with server-sent events or not)
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text format)
//
// The layers: serve/api.* parses requests and builds responses (OpenAI's objects), serve/engine.*
// runs the slots (one thread, BatchedRounds), serve/metrics.* counts, serve/http.* is the HTTP
// layer (Boost.Beast: connections, limits, disconnects); this file holds the routes between them,
// the flags and the shutdown. docs/serve.md documents all of it.
//
// Threads: the engine thread (models, rounds); the HTTP layer's I/O threads (every socket, and
// the quick routes); a thread per completion request (parse, tokenize, wait for the job's text,
// queue it); one thread waiting for SIGINT/SIGTERM, which are blocked in every other thread. The
// first signal drains: new requests get 503, the admitted ones finish, their answers get
// --timeout to be written, then the server stops and the process exits 0. A second signal
// cancels what is still running.

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
#include <CLI/CLI.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/serve/api.hpp"
#include "specdec/serve/engine.hpp"
#include "specdec/serve/http.hpp"
#include "specdec/serve/metrics.hpp"

namespace specdec::cli {

namespace {

using nlohmann::json;
using serve::ApiError;
using serve::Endpoint;
namespace http = serve::http;

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
  std::optional<int> timeout;               ///< --timeout (-to), seconds
  std::vector<std::string> cors_origins;    ///< --cors-origin
  std::optional<std::string> ssl_key_file, ssl_cert_file;  ///< HTTPS
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
  std::atomic<std::uint64_t> next_id{1};
  std::vector<std::string> api_keys;      ///< empty: no authentication
  std::vector<std::string> cors_origins;  ///< --cors-origin: empty, no cross-origin requests
  bool verbose = false;
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
bool authorised(const Server& s, const http::Request& req) {
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view header = req.header("Authorization");
  if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0)
    return false;
  const std::string_view key = header.substr(kBearer.size());
  bool match = false;
  for (const std::string& k : s.api_keys) match = equal_in_constant_time(key, k) || match;
  return match;
}

/// The routes anyone may read with --api-key set (llama-server's public endpoints).
bool is_public(const std::string& path) { return path == "/health" || path == "/v1/models"; }

// ------------------------------------------------------------------------ CORS

/// Whether a browser page from `origin` may read the answers (--cors-origin; "*": any).
bool cors_allowed(const Server& s, std::string_view origin) {
  if (origin.empty()) return false;
  return std::any_of(s.cors_origins.begin(), s.cors_origins.end(),
                     [origin](const std::string& o) { return o == "*" || o == origin; });
}

/// A request a browser sent from a page of another origin: it names its Origin, and that is not
/// this server's own (http://HOST as the request addressed it). Such a request can be "simple"
/// (a text/plain POST needs no preflight), so it is refused before it runs, not only hidden from
/// the page: a page must not be able to start generations on a server it was not allowed.
bool cross_origin(const http::Request& req) {
  const std::string_view origin = req.header("Origin");
  return !origin.empty() && origin != fmt::format("http://{}", req.header("Host"));
}

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

http::Response json_response(int status, const json& body) {
  http::Response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

http::Response error_response(const ApiError& e) {
  return json_response(e.status, serve::error_json(e));
}

/// The completion endpoint a path names, if it names one.
std::optional<Endpoint> completion_endpoint(const std::string& path) {
  if (path == "/v1/completions") return Endpoint::completions;
  if (path == "/v1/chat/completions") return Endpoint::chat_completions;
  return std::nullopt;
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

/// What every response passes on its way out: counted in the metrics (before it is written, so
/// that a client reading /metrics right after its answer finds it counted), a 429 says when to
/// come back, the CORS header for an allowed origin, every 5xx logged with its request id.
void decorate(const Server& s, const http::Request* req, const std::string& request_id,
              http::Response& res) {
  const std::string path = req ? req->path : std::string();
  s.metrics->http_request(endpoint_label(path), res.status);
  if (res.status == 429) res.headers.push_back({"Retry-After", "1"});
  if (req && !s.cors_origins.empty() && !req->header("Origin").empty())
    res.headers.push_back({"Vary", "Origin"});
  if (req && cors_allowed(s, req->header("Origin")))
    res.headers.push_back({"Access-Control-Allow-Origin", std::string(req->header("Origin"))});
  if (res.status >= 500)
    fmt::print(stderr, "specdec serve: {} {} {} -> {}: {}\n", request_id, req ? req->method : "-",
               req ? req->path : "-", res.status, serve::excerpt(res.body, 500));
  if (s.verbose)
    fmt::print(stderr, "specdec serve: {} {} {} -> {}\n", request_id, req ? req->method : "-",
               req ? req->target : "-", res.status);
}

void respond(const Server& s, http::Exchange& ex, http::Response res) {
  decorate(s, &ex.request(), ex.request().id, res);
  ex.respond(std::move(res));
}

std::uint64_t random_seed() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) | device();
}

/// Refuses, before it is tokenized, a prompt text whose bytes need more tokens than the context
/// holds (Tokenizer::max_bytes_per_token): tokenizing costs tens of bytes of memory per byte of
/// text, and a request must not cost more than its context.
void check_prompt_bytes(const Server& s, std::size_t bytes, const char* param) {
  const std::optional<std::size_t> per_token = s.tokenizer->max_bytes_per_token();
  if (!per_token) return;  // this tokenizer can encode any length in a few tokens
  const std::size_t most = (s.context_length - 1) * *per_token;
  if (bytes > most)
    throw ApiError(400,
                   fmt::format("the prompt has {} bytes but at most {} can fit the context's {} "
                               "positions (a token of this model stands for at most {} bytes; the "
                               "server's -c sets the context)",
                               bytes, most, s.context_length, *per_token),
                   param, "context_length_exceeded");
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
    check_prompt_bytes(s, text.size(), "messages");
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
    check_prompt_bytes(s, r.prompt.size(), "prompt");
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

/// Answers a completion: parse, tokenize, submit, then wait for the job and write its answer (at
/// once, or as server-sent events while it is generated). Runs on a thread of its own (the HTTP
/// layer's blocking handlers). A client found gone cancels the job: the engine frees its slot
/// before the next round.
void handle_completion(Server& s, http::Exchange& ex, Endpoint endpoint) {
  if (s.draining.load())
    throw ApiError(503, "the server is shutting down", "", "server_draining", "server_error");
  const serve::CompletionRequest r =
      serve::parse_request(ex.request().body, endpoint, s.model_name);
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
  ex.on_client_gone([job] { job->cancel(); });
  serve::ResponseInfo info;
  info.id = fmt::format("{}-{:x}", endpoint == Endpoint::chat_completions ? "chatcmpl" : "cmpl",
                        s.next_id.fetch_add(1));
  info.created = static_cast<std::int64_t>(std::time(nullptr));
  info.model = s.model_name;
  info.endpoint = endpoint;

  if (!r.stream) {
    job->wait_finished();
    if (ex.client_gone()) return;
    if (!job->error().empty())
      throw ApiError(500, job->error(), "", "generation_failed", "server_error");
    const GenerationResult& result = job->result();
    respond(s, ex,
            json_response(
                200,
                serve::response_json(
                    info, result.text, result.stop_reason,
                    serve::usage_json(prompt_size, result.tokens.size()), speculative_json(s, *job),
                    r.logprobs ? serve::logprobs_json(endpoint, *s.tokenizer, result.logprobs)
                               : json(nullptr))));
    return;
  }

  http::Response head;
  head.content_type = "text/event-stream";
  head.headers.push_back({"Cache-Control", "no-cache"});
  decorate(s, &ex.request(), ex.request().id, head);
  ex.start_stream(std::move(head));
  const bool with_logprobs = r.logprobs.has_value();
  std::size_t text_offset = 0;  // completions' text_offset: the text streamed so far
  // A chunk's logprobs: those of its tokens (null when the request asked for none); the
  // completions' text_offset goes on past them.
  const auto logprobs = [&](std::span<const sampling::TokenLogprob> lps) {
    if (!with_logprobs) return json(nullptr);
    json j = serve::logprobs_json(endpoint, *s.tokenizer, lps, text_offset);
    for (const auto& lp : lps) text_offset += s.tokenizer->token_bytes(lp.token).size();
    return j;
  };
  bool first = true;
  if (endpoint == Endpoint::chat_completions) {
    // OpenAI's first chunk of a chat stream: the role, no content yet.
    json chunk = serve::chunk_json(info, "", true, std::nullopt);
    chunk["choices"][0]["delta"]["content"] = "";
    ex.write(serve::sse_event(chunk));
    first = false;
  }
  for (;;) {
    const serve::Job::Update update = job->wait(std::chrono::milliseconds(100));
    std::string out;
    for (const serve::Job::Piece& piece : update.pieces) {
      out += serve::sse_event(
          serve::chunk_json(info, piece.text, first, {}, nullptr, logprobs(piece.logprobs)));
      first = false;
    }
    if (update.finished) {
      if (!job->error().empty()) {
        out += serve::sse_event(serve::error_json(
            ApiError(500, job->error(), "", "generation_failed", "server_error")));
      } else {
        const GenerationResult& result = job->result();
        // The tokens that released no text (a stop string's) come with the last chunk.
        out += serve::sse_event(
            serve::chunk_json(info, "", first, result.stop_reason, speculative_json(s, *job),
                              update.trailing.empty() ? json(nullptr) : logprobs(update.trailing)));
        if (r.include_usage)
          out += serve::sse_event(
              serve::usage_chunk_json(info, serve::usage_json(prompt_size, result.tokens.size())));
      }
      out += "data: [DONE]\n\n";
    }
    if (!ex.write(out)) {
      job->cancel();  // the client is gone
      return;
    }
    if (update.finished) break;
  }
  ex.end();
}

// ------------------------------------------------------------------------ the routes

/// The routes, as llama-server has them. /health, /metrics and /v1/models answer on the HTTP
/// layer's I/O threads; completions get a thread of their own (blocking()).
void route(Server& s, http::Exchange& ex) {
  const http::Request& req = ex.request();
  const std::optional<Endpoint> completion = completion_endpoint(req.path);
  // With --api-key, a request without a valid key gets a 401 (the public routes excepted).
  if (!s.api_keys.empty() && !is_public(req.path) && !authorised(s, req)) {
    http::Response res = error_response(
        ApiError(401,
                 "invalid or missing API key: send it as 'Authorization: Bearer KEY' (the OpenAI "
                 "clients' api_key)",
                 "", "invalid_api_key"));
    res.headers.push_back({"WWW-Authenticate", "Bearer"});
    return respond(s, ex, std::move(res));
  }
  // A page of another origin may only reach the server as --cors-origin allows.
  if (cross_origin(req) && !cors_allowed(s, req.header("Origin")))
    return respond(s, ex,
                   error_response(ApiError(
                       403,
                       fmt::format("cross-origin request from {} refused (start the server with "
                                   "--cors-origin ORIGIN to allow a web page to use it)",
                                   serve::excerpt(req.header("Origin"), 200)),
                       "", "cross_origin_refused")));
  if (req.method == "OPTIONS") {  // a CORS preflight of an allowed origin, or a plain OPTIONS
    http::Response res;
    res.status = 204;
    res.content_type.clear();
    res.headers.push_back({"Allow", completion ? "POST, OPTIONS" : "GET, OPTIONS"});
    if (cors_allowed(s, req.header("Origin"))) {
      res.headers.push_back({"Access-Control-Allow-Methods", "GET, POST, OPTIONS"});
      res.headers.push_back({"Access-Control-Allow-Headers", "Authorization, Content-Type"});
      res.headers.push_back({"Access-Control-Max-Age", "600"});
    }
    return respond(s, ex, std::move(res));
  }

  if (completion) {
    if (req.method != "POST")
      return respond(s, ex,
                     error_response(ApiError(405, fmt::format("{} takes POST requests", req.path),
                                             "", "method_not_allowed")));
    try {
      handle_completion(s, ex, *completion);
    } catch (const ApiError& e) {
      respond(s, ex, error_response(e));
    } catch (const std::exception& e) {
      respond(s, ex, error_response(ApiError(500, e.what(), "", "internal_error", "server_error")));
    }
    return;
  }
  const bool known = req.path == "/v1/models" || req.path == "/health" || req.path == "/metrics";
  if (known && req.method != "GET")
    return respond(s, ex,
                   error_response(ApiError(405, fmt::format("{} takes GET requests", req.path), "",
                                           "method_not_allowed")));
  if (req.path == "/v1/models") {
    // File names only: the server's directories are nobody's business.
    json meta = {{"target", std::filesystem::path(s.target_path).filename().string()},
                 {"drafter", s.setup.label()},
                 {"context_length", s.context_length},
                 {"slots", s.slots},
                 {"chat_template",
                  s.chat_template ? json(std::string(s.chat_template->name())) : json(nullptr)}};
    if (!s.draft_path.empty())
      meta["draft"] = std::filesystem::path(s.draft_path).filename().string();
    return respond(s, ex,
                   json_response(200, {{"object", "list"},
                                       {"data", json::array({{{"id", s.model_name},
                                                              {"object", "model"},
                                                              {"created", s.created},
                                                              {"owned_by", "specdec"},
                                                              {"meta", meta}}})}}));
  }
  if (req.path == "/health") {
    const serve::Engine::Load load = s.engine->load();
    const bool draining = load.draining || s.draining.load();
    return respond(s, ex,
                   json_response(draining ? 503 : 200, {{"status", draining ? "draining" : "ok"},
                                                        {"slots_idle", load.slots - load.busy},
                                                        {"slots_processing", load.busy},
                                                        {"queued", load.queued}}));
  }
  if (req.path == "/metrics") {
    http::Response res;
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = s.metrics->render();
    return respond(s, ex, std::move(res));
  }
  respond(s, ex,
          error_response(ApiError(404,
                                  fmt::format("no route {} {} (see docs/serve.md)", req.method,
                                              serve::excerpt(req.path, 200)),
                                  "", "not_found")));
}

/// Waits for SIGINT / SIGTERM (blocked in every thread, so only this one receives them): the
/// first drains and stops the server, a second cancels what is still running.
void watch_signals(Server& s, http::Server& http, std::chrono::seconds last_writes,
                   const std::atomic<bool>& run_returned) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signals = 0;
  std::thread drainer;
  for (;;) {
    const timespec tick{0, 100'000'000};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (run_returned.load()) break;
    if (sig != SIGINT && sig != SIGTERM) continue;
    if (++signals == 1) {
      const serve::Engine::Load load = s.engine->load();
      fmt::print(stderr,
                 "specdec serve: {}: draining ({} running, {} queued; new requests get 503; "
                 "send it again to cancel them)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", load.busy, load.queued);
      s.draining.store(true);
      s.engine->drain();
      drainer = std::thread([&s, &http, last_writes] {
        s.engine->join();
        // No new connections; the last answers get --timeout to be written, then everything
        // still open is closed.
        http.drain();
        http.wait_idle(last_writes);
        http.stop();
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

/// The largest request body worth reading: 16 MiB, or less when the prompt the context can hold
/// is shorter (Tokenizer::max_bytes_per_token): six times its bytes (JSON's worst escaping,
/// "\u001f" for one byte) and 4 MiB for the other fields (a logit_bias over a whole vocabulary).
/// A body past it is refused (413) while it arrives, before it costs its size several times
/// over in parsing.
std::size_t body_limit(const Server& s) {
  constexpr std::size_t kMost = std::size_t{16} << 20, kOtherFields = std::size_t{4} << 20;
  const std::optional<std::size_t> per_token = s.tokenizer->max_bytes_per_token();
  if (!per_token) return kMost;
  return std::min(kMost, 6 * (s.context_length - 1) * *per_token + kOtherFields);
}

/// Listens until SIGINT / SIGTERM, then stops the engine.
void listen_and_serve(const ServeOptions& o, Server& s) {
  s.created = static_cast<std::int64_t>(std::time(nullptr));

  http::Options options;
  options.host = o.host;
  options.port = o.port;
  // A thread per request that can be running or queued, and some for the requests refused with
  // 429 (a completion holds its thread until its answer is queued).
  options.max_handlers = o.http_threads != 0 ? o.http_threads : o.parallel + o.queue + 8;
  options.max_body_bytes = body_limit(s);
  if (o.ssl_cert_file) {
    options.tls_cert_file = *o.ssl_cert_file;
    options.tls_key_file = *o.ssl_key_file;
  }
  const std::chrono::seconds timeout(o.timeout.value_or(30));
  options.request_timeout = timeout;
  options.write_timeout = timeout;
  http::Callbacks callbacks;
  callbacks.handle = [&s](const std::shared_ptr<http::Exchange>& ex) { route(s, *ex); };
  callbacks.blocking = [](const http::Request& req) {
    return req.method == "POST" && completion_endpoint(req.path).has_value();
  };
  // What the HTTP layer refuses by itself (malformed, too large, compressed, busy) gets an
  // OpenAI-style body too.
  callbacks.error = [&s](int status, const std::string& message, const std::string& id) {
    const char* code = status == 413   ? "request_too_large"
                       : status == 429 ? "rate_limit_exceeded"
                       : status == 415 ? "unsupported_encoding"
                       : status >= 500 ? "server_error"
                                       : "invalid_request";
    http::Response res = error_response(ApiError(
        status, message, "", code, status >= 500 ? "server_error" : "invalid_request_error"));
    decorate(s, nullptr, id, res);
    return res;
  };
  http::Server http(options, callbacks);
  const int port = http.listen();
  if (const auto per_token = s.tokenizer->max_bytes_per_token())
    fmt::print(stderr,
               "specdec serve: request bodies up to {:.1f} MiB; prompts past {} bytes are refused "
               "before tokenizing ({} positions, at most {} bytes a token)\n",
               static_cast<double>(options.max_body_bytes) / (1 << 20),
               (s.context_length - 1) * *per_token, s.context_length, *per_token);
  fmt::print(stderr,
             "specdec serve: {} ({}), {} slots on the {} backend, listening on {}://{}:{}\n",
             s.model_name, s.setup.label(), o.parallel, backend_name(s.backend),
             o.ssl_cert_file ? "https" : "http", o.host, port);
  std::fflush(stderr);

  std::atomic<bool> run_returned{false};
  std::thread signals([&] { watch_signals(s, http, timeout, run_returned); });
  http.run();
  run_returned.store(true);
  signals.join();
  s.engine->cancel_all();
  s.engine->join();
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
  if (o.ssl_cert_file.has_value() != o.ssl_key_file.has_value())
    throw UsageError("serve: HTTPS needs both --ssl-cert-file and --ssl-key-file");
  (void)o.models.kv_type();

  // Signals: blocked from here on in this thread and every thread it starts (the engine's, the
  // CPU backend's pool, the HTTP layer's); watch_signals() takes them with sigtimedwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hung up is a failed write, not the end of us

  Server s;
  s.api_keys = read_api_keys(o);
  s.cors_origins = o.cors_origins;
  s.verbose = o.verbose;
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
                  "seconds a request's headers and body may take to arrive, and each write of "
                  "an answer (default: 30)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--ssl-cert-file", o->ssl_cert_file,
                  "serve HTTPS with this PEM certificate (chain); needs --ssl-key-file")
      ->check(CLI::ExistingFile);
  cmd->add_option("--ssl-key-file", o->ssl_key_file, "the PEM private key of --ssl-cert-file")
      ->check(CLI::ExistingFile);
  cmd->add_option("--cors-origin", o->cors_origins,
                  "a web page origin (https://host:port) allowed to call the server from a "
                  "browser, or * for any; repeatable (default: none, cross-origin requests get "
                  "403)")
      ->type_name("ORIGIN");
  cmd->add_flag("--no-batching", o->no_batching,
                "run the slots' rounds one after the other instead of batched (to measure what "
                "batching gains; the tokens are the same)");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace specdec::cli
