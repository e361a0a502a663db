#pragma once
// The OpenAI API as `specdec serve` speaks it: request bodies of /v1/completions and
// /v1/chat/completions parsed and checked field by field, and the response objects (whole, and
// the chunks of a stream). Pure functions on JSON: no HTTP, no models (serve.cpp and engine.hpp
// do those).
//
// Every refusal is an ApiError: the HTTP status and OpenAI's error object
//   {"error": {"message": ..., "type": "invalid_request_error", "param": "temperature",
//              "code": "invalid_type"}}
// naming the field and what was wrong with it.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/common.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/sampling/logprobs.hpp"

namespace specdec::serve {

/// A value the client sent, as an error message quotes it: at most `max_bytes` of it (whole UTF-8
/// characters), then "... (N bytes)". A 15 MB prompt must not come back as a 15 MB error.
std::string excerpt(std::string_view text, std::size_t max_bytes = 200);

/// An error response: status, and the fields of OpenAI's error object. The message and the param
/// are capped (excerpt(): 1000 and 200 bytes) whatever they quote.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string param = {},
           std::string code = "invalid_value", std::string type = "invalid_request_error");
  int status;
  std::string param, code, type;
};

/// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
nlohmann::json error_json(const ApiError& error);

enum class Endpoint { completions, chat_completions };

/// A completion request, checked.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  /// completions: the prompt as text, or as token ids (prompt_ids, when given as numbers).
  std::string prompt;
  std::optional<std::vector<std::int64_t>> prompt_ids;
  /// chat completions: the conversation.
  std::vector<ChatMessage> messages;

  std::optional<std::int64_t> max_tokens;  ///< absent: until EOS or the context is full
  sampling::SamplingParams sampling;       ///< temperature (default 1), top_k, top_p, min_p
  /// presence_penalty, frequency_penalty (over the completion's tokens, as OpenAI) and
  /// logit_bias; the token ids are checked against the vocabulary by the server.
  sampling::Penalties penalties;
  std::optional<std::uint64_t> seed;  ///< absent (or -1): the server draws one
  std::vector<std::string> stop;
  /// Log-probabilities asked for: the number of alternatives per token (completions:
  /// `logprobs`; chat: `logprobs: true` and `top_logprobs`); absent: none.
  std::optional<std::size_t> logprobs;
  bool ignore_eos = false;  ///< extension (llama.cpp's): do not stop at the EOS token
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage: a last chunk with the usage
};

/// Parses a request body for `endpoint`. `model` is the name the server answers to: a request
/// naming another model is refused (a request without "model" is served). Throws ApiError
/// (400) for a body that is not a JSON object, a field of the wrong type or out of range, n != 1,
/// and the OpenAI features specdec does not have (echo, repetition_penalty, tools,
/// several prompts, non-text content, ...), each naming the field.
CompletionRequest parse_request(std::string_view body, Endpoint endpoint, const std::string& model);

/// OpenAI's finish_reason for a stop: "stop" (EOS, end of turn, a stop string), "length" (the
/// token budget or the context), "cancelled" (the server was stopped).
std::string_view finish_reason(StopReason reason);

/// What a response says about the request besides the text.
struct ResponseInfo {
  std::string id;  ///< "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;
  std::string model;
  Endpoint endpoint = Endpoint::completions;
};

/// The usage block: prompt_tokens, completion_tokens, total_tokens.
nlohmann::json usage_json(std::size_t prompt_tokens, std::size_t completion_tokens);

/// A choice's `logprobs` object in OpenAI's format for the endpoint. Completions:
/// {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"} (offsets
/// counted from `text_offset`, the length of the text before these tokens); chat: {"content":
/// [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}],
/// "refusal": null}. From the target's processed distribution of each token (docs/serve.md).
nlohmann::json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                             std::span<const sampling::TokenLogprob> logprobs,
                             std::size_t text_offset = 0);

/// A whole response: one choice with the text, finish_reason and `logprobs` (null when not
/// asked for), the usage, and `speculative` (the extension: the request's speculative
/// statistics).
nlohmann::json response_json(const ResponseInfo& info, const std::string& text, StopReason reason,
                             const nlohmann::json& usage, const nlohmann::json& speculative,
                             const nlohmann::json& logprobs = nullptr);

/// One chunk of a stream: a piece of text (chat: the delta's content; the first chunk of a chat
/// stream carries the role) with its tokens' `logprobs`, or the last chunk with the
/// finish_reason (and `speculative`).
nlohmann::json chunk_json(const ResponseInfo& info, const std::string& text, bool first,
                          const std::optional<StopReason>& reason,
                          const nlohmann::json& speculative = nullptr,
                          const nlohmann::json& logprobs = nullptr);

/// The chunk stream_options.include_usage adds after the last: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseInfo& info, const nlohmann::json& usage);

/// "data: <json>\n\n", one server-sent event.
std::string sse_event(const nlohmann::json& data);

}  // namespace specdec::serve
