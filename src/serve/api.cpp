#include "specdec/serve/api.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace specdec::serve {

using nlohmann::json;

std::string excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::size_t cut = max_bytes;  // back to the start of a UTF-8 character
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_,
                   std::string type_)
    : std::runtime_error(excerpt(message, 1000)),
      status(status_),
      param(param_.size() <= 200 ? std::move(param_) : excerpt(param_, 200)),
      code(std::move(code_)),
      type(std::move(type_)) {}

json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {

// ------------------------------------------------------------------------ typed fields

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "something else";
  }
}

[[noreturn]] void wrong_type(const std::string& param, std::string_view expected, const json& v) {
  throw ApiError(400, fmt::format("'{}' must be {}, got {}", param, expected, type_name(v)), param,
                 "invalid_type");
}

[[noreturn]] void out_of_range(const std::string& param, std::string_view range, const json& v) {
  throw ApiError(400, fmt::format("'{}' must be {}, got {}", param, range, excerpt(v.dump())),
                 param, "invalid_value");
}

[[noreturn]] void unsupported(const std::string& param, std::string_view why) {
  throw ApiError(400, fmt::format("'{}' is not supported by specdec serve: {}", param, why), param,
                 "unsupported_parameter");
}

/// The field, or nullptr when it is absent or null (OpenAI treats an explicit null as absent).
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x)) out_of_range(key, "a finite number", *v);
  return x;
}

std::optional<std::int64_t> integer(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) {
    if (v->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      out_of_range(key, "at most 2^63 - 1", *v);
    return static_cast<std::int64_t>(v->get<std::uint64_t>());
  }
  if (!v->is_number_integer()) wrong_type(key, "an integer", *v);
  return v->get<std::int64_t>();
}

std::optional<bool> boolean(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> string(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

// ------------------------------------------------------------------------ the fields

/// The most alternatives per token a request may ask for (OpenAI's limit for chat; its
/// completions allow 5).
constexpr std::int64_t kMaxTopLogprobs = 20;

/// Completions: `logprobs` is the number of alternatives (false: off). Chat: `logprobs` is a
/// boolean and `top_logprobs` the number of alternatives, which needs logprobs true.
void parse_logprobs(const json& body, Endpoint endpoint, std::optional<std::size_t>& out) {
  const auto count = [](const char* key, const json& v) {
    if (!v.is_number_integer()) wrong_type(key, "an integer", v);
    const auto n = v.get<std::int64_t>();
    if (n < 0 || n > kMaxTopLogprobs)
      out_of_range(key, fmt::format("a whole number in [0, {}]", kMaxTopLogprobs), v);
    return static_cast<std::size_t>(n);
  };
  const json* v = field(body, "logprobs");
  if (endpoint == Endpoint::completions) {
    if (field(body, "top_logprobs"))
      unsupported("top_logprobs", "/v1/completions takes the number of alternatives in 'logprobs'");
    if (v == nullptr || (v->is_boolean() && !v->get<bool>())) return;
    out = count("logprobs", *v);
    return;
  }
  const bool on = boolean(body, "logprobs").value_or(false);
  const json* top = field(body, "top_logprobs");
  if (top != nullptr && !on)
    throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
  if (on) out = top != nullptr ? count("top_logprobs", *top) : 0;
}

/// presence_penalty and frequency_penalty (OpenAI: in [-2, 2], over the tokens of the completion
/// so far) and logit_bias ({"token id": bias in [-100, 100]}).
void parse_penalties(const json& body, sampling::Penalties& p) {
  p.scope = sampling::PenaltyScope::completion;
  p.last_n = -1;
  for (const auto& [key, value] :
       {std::pair{"presence_penalty", &p.presence}, std::pair{"frequency_penalty", &p.frequency}}) {
    if (const auto x = number(body, key)) {
      if (!(*x >= -2 && *x <= 2)) out_of_range(key, "in [-2, 2]", *field(body, key));
      *value = static_cast<float>(*x);
    }
  }
  const json* bias = field(body, "logit_bias");
  if (bias == nullptr) return;
  if (!bias->is_object()) wrong_type("logit_bias", "an object of token ids to biases", *bias);
  for (const auto& [id, value] : bias->items()) {
    const std::string param = "logit_bias." + id;
    if (id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string::npos)
      throw ApiError(400,
                     fmt::format("'logit_bias' keys are token ids (whole numbers as strings), "
                                 "got \"{}\"",
                                 excerpt(id)),
                     "logit_bias", "invalid_value");
    if (!value.is_number()) wrong_type(param, "a number", value);
    const double b = value.get<double>();
    if (!(b >= -100 && b <= 100)) out_of_range(param, "in [-100, 100]", value);
    p.logit_bias.push_back({static_cast<token_t>(std::stol(id)), static_cast<float>(b)});
  }
}

/// Refuses the OpenAI features specdec does not have, unless they hold their "off" value.
void refuse_unsupported(const json& body) {
  if (boolean(body, "echo").value_or(false)) unsupported("echo", "the prompt is not echoed");
  for (const char* key : {"repetition_penalty", "repeat_penalty"})
    if (number(body, key).value_or(1.0) != 1.0)
      unsupported(key,
                  "the server penalises repetition as OpenAI does, with presence_penalty and "
                  "frequency_penalty over the completion's tokens");
  if (const auto best_of = integer(body, "best_of"); best_of && *best_of != 1)
    unsupported("best_of", "one completion per request");
  if (const auto suffix = string(body, "suffix"); suffix && !suffix->empty())
    unsupported("suffix", "there is no insertion mode");
  for (const char* key : {"tools", "functions"})
    if (const json* v = field(body, key); v && !(v->is_array() && v->empty()))
      unsupported(key, "there are no tool calls");
  if (const json* v = field(body, "tool_choice"); v && !(v->is_string() && *v == "none"))
    unsupported("tool_choice", "there are no tool calls");
  if (const json* v = field(body, "response_format"); v) {
    if (!v->is_object()) wrong_type("response_format", "an object", *v);
    const auto type = v->find("type");
    if (type == v->end() || *type != "text")
      unsupported("response_format", "only {\"type\": \"text\"} (no JSON mode or schemas)");
  }
  if (const auto n = integer(body, "n"); n && *n != 1)
    throw ApiError(400,
                   fmt::format("'n' must be 1: specdec serve generates one choice per request, got "
                               "{}",
                               *n),
                   "n", "unsupported_value");
  (void)string(body, "user");  // accepted and ignored, but a string
}

/// "prompt" of /v1/completions: a string, or token ids, or a list holding one of these.
void parse_prompt(const json& body, CompletionRequest& r) {
  const json* v = field(body, "prompt");
  if (v == nullptr)
    throw ApiError(400, "'prompt' is required", "prompt", "missing_required_parameter");
  const json* p = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    if (v->size() != 1)
      throw ApiError(400,
                     fmt::format("'prompt' holds {} prompts: specdec serve takes one prompt per "
                                 "request",
                                 v->size()),
                     "prompt", "unsupported_value");
    p = &v->front();
  }
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) throw ApiError(400, "'prompt' is empty", "prompt");
    return;
  }
  if (!p->is_array())
    wrong_type("prompt", "a string, an array of token ids, or an array of one of these", *p);
  if (p->empty()) throw ApiError(400, "'prompt' is empty", "prompt");
  std::vector<std::int64_t> ids;
  for (const json& t : *p) {
    if (!t.is_number_integer()) wrong_type("prompt", "a string or an array of token ids", *p);
    ids.push_back(t.get<std::int64_t>());
  }
  r.prompt_ids = std::move(ids);
}

/// "messages" of /v1/chat/completions.
void parse_messages(const json& body, CompletionRequest& r) {
  const json* v = field(body, "messages");
  if (v == nullptr)
    throw ApiError(400, "'messages' is required", "messages", "missing_required_parameter");
  if (!v->is_array()) wrong_type("messages", "an array of messages", *v);
  if (v->empty()) throw ApiError(400, "'messages' is empty", "messages");
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) wrong_type(where, "an object", m);
    const json* role = field(m, "role");
    if (role == nullptr)
      throw ApiError(400, fmt::format("'{}.role' is required", where), where + ".role",
                     "missing_required_parameter");
    if (!role->is_string()) wrong_type(where + ".role", "a string", *role);
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant")
      throw ApiError(400,
                     fmt::format("'{}.role' is '{}': specdec serve takes system, user and "
                                 "assistant messages",
                                 where, excerpt(role->get<std::string>())),
                     where + ".role");
    const json* content = field(m, "content");
    if (content == nullptr)
      throw ApiError(400, fmt::format("'{}.content' is required", where), where + ".content",
                     "missing_required_parameter");
    std::string text;
    if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: the text ones are joined; images and audio are refused.
      for (std::size_t j = 0; j < content->size(); ++j) {
        const json& part = (*content)[j];
        const std::string part_where = fmt::format("{}.content[{}]", where, j);
        if (!part.is_object()) wrong_type(part_where, "an object", part);
        const auto type = string(part, "type");
        if (type != "text")
          unsupported(part_where + ".type",
                      fmt::format("content of type '{}': only text", excerpt(type.value_or(""))));
        const auto part_text = string(part, "text");
        if (!part_text)
          throw ApiError(400, fmt::format("'{}.text' is required", part_where),
                         part_where + ".text", "missing_required_parameter");
        text += *part_text;
      }
    } else {
      wrong_type(where + ".content", "a string or an array of text parts", *content);
    }
    r.messages.push_back({std::move(name), std::move(text)});
  }
}

}  // namespace

CompletionRequest parse_request(std::string_view body_text, Endpoint endpoint,
                                const std::string& model) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // a syntax error, or a number that overflows a double
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", excerpt(e.what())),
                   "", "invalid_json");
  }
  if (!body.is_object()) wrong_type("body", "a JSON object", body);

  CompletionRequest r;
  r.endpoint = endpoint;
  if (const auto name = string(body, "model"); name && *name != model)
    throw ApiError(400,
                   fmt::format("the model '{}' does not exist: this server serves '{}' (GET "
                               "/v1/models)",
                               excerpt(*name), model),
                   "model", "model_not_found");
  if (endpoint == Endpoint::completions)
    parse_prompt(body, r);
  else
    parse_messages(body, r);
  refuse_unsupported(body);

  // max_completion_tokens is the newer name of max_tokens (chat); -1: no limit (llama.cpp's).
  std::optional<std::int64_t> max_tokens = integer(body, "max_tokens");
  if (const auto newer = integer(body, "max_completion_tokens")) max_tokens = newer;
  if (max_tokens && *max_tokens < -1)
    out_of_range(field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                 "a whole number >= 0 (or -1: until the end of the text)", json(*max_tokens));
  if (max_tokens && *max_tokens >= 0) r.max_tokens = max_tokens;
  if (!max_tokens && endpoint == Endpoint::completions) r.max_tokens = 16;  // OpenAI's default

  // The sampling settings are checked as the floats the sampler gets (top_p 1e-300 is a positive
  // double but float 0). A temperature below sampling::kMinTemperature is greedy.
  r.sampling.temperature = static_cast<float>(number(body, "temperature").value_or(1.0));
  if (r.sampling.temperature < 0 || r.sampling.temperature > 2)
    out_of_range("temperature", "in [0, 2] (0 is greedy)", *field(body, "temperature"));
  if (const auto top_p = number(body, "top_p")) {
    r.sampling.top_p = static_cast<float>(*top_p);
    if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1))
      out_of_range("top_p", "in (0, 1] (as a 32-bit float)", *field(body, "top_p"));
  }
  if (const auto top_k = integer(body, "top_k")) {
    if (*top_k < 0 || *top_k > std::numeric_limits<int>::max())
      out_of_range("top_k", "a whole number >= 0 (0: off)", *field(body, "top_k"));
    r.sampling.top_k = static_cast<int>(*top_k);
  }
  if (const auto min_p = number(body, "min_p")) {
    r.sampling.min_p = static_cast<float>(*min_p);
    if (!(r.sampling.min_p >= 0 && r.sampling.min_p <= 1))
      out_of_range("min_p", "in [0, 1]", *field(body, "min_p"));
  }
  if (const json* seed = field(body, "seed")) {
    if (seed->is_number_unsigned()) {
      r.seed = seed->get<std::uint64_t>();
    } else if (seed->is_number_integer()) {
      const std::int64_t s = seed->get<std::int64_t>();
      if (s < -1) out_of_range("seed", "a whole number >= 0 (or -1: a random seed)", *seed);
      if (s >= 0) r.seed = static_cast<std::uint64_t>(s);
    } else {
      wrong_type("seed", "an integer", *seed);
    }
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) wrong_type("stop", "a string or an array of strings", *stop);
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
    if (r.stop.size() > 16) out_of_range("stop", "at most 16 strings", *stop);
    for (const std::string& s : r.stop)
      if (s.empty()) out_of_range("stop", "non-empty strings", *stop);
  }
  parse_penalties(body, r.penalties);
  parse_logprobs(body, endpoint, r.logprobs);
  r.ignore_eos = boolean(body, "ignore_eos").value_or(false);
  r.stream = boolean(body, "stream").value_or(false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) wrong_type("stream_options", "an object", *options);
    if (const json* usage = field(*options, "include_usage")) {
      if (!usage->is_boolean()) wrong_type("stream_options.include_usage", "a boolean", *usage);
      r.include_usage = usage->get<bool>();
    }
  }
  return r;
}

std::string_view finish_reason(StopReason reason) {
  switch (reason) {
    case StopReason::eos:
    case StopReason::stop_string:
      return "stop";
    case StopReason::max_tokens:
    case StopReason::context_full:
      return "length";
    case StopReason::cancelled:
      return "cancelled";
  }
  return "stop";
}

json usage_json(std::size_t prompt_tokens, std::size_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
json envelope(const ResponseInfo& info, bool chunk) {
  const bool chat = info.endpoint == Endpoint::chat_completions;
  return {
      {"id", info.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", info.created},
      {"model", info.model}};
}
}  // namespace

json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                   std::span<const sampling::TokenLogprob> logprobs, std::size_t text_offset) {
  if (endpoint == Endpoint::completions) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
         offsets = json::array();
    for (const sampling::TokenLogprob& lp : logprobs) {
      const std::string text = tokenizer.token_bytes(lp.token);
      tokens.push_back(text);
      token_logprobs.push_back(lp.logprob);
      json alternatives = json::object();
      for (const sampling::TopLogprob& t : lp.top)
        alternatives.emplace(tokenizer.token_bytes(t.token), t.logprob);  // the likeliest wins
      top.push_back(std::move(alternatives));
      offsets.push_back(text_offset);
      text_offset += text.size();
    }
    return {{"tokens", tokens},
            {"token_logprobs", token_logprobs},
            {"top_logprobs", top},
            {"text_offset", offsets}};
  }
  const auto entry = [&tokenizer](token_t id, float logprob) {
    const std::string text = tokenizer.token_bytes(id);
    json bytes = json::array();
    for (const char c : text) bytes.push_back(static_cast<unsigned char>(c));
    return json{{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
  };
  json content = json::array();
  for (const sampling::TokenLogprob& lp : logprobs) {
    json j = entry(lp.token, lp.logprob);
    j["top_logprobs"] = json::array();
    for (const sampling::TopLogprob& t : lp.top)
      j["top_logprobs"].push_back(entry(t.token, t.logprob));
    content.push_back(std::move(j));
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json response_json(const ResponseInfo& info, const std::string& text, StopReason reason,
                   const json& usage, const json& speculative, const json& logprobs) {
  json out = envelope(info, false);
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason(reason)}};
  if (info.endpoint == Endpoint::chat_completions)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  out["choices"] = json::array({choice});
  out["usage"] = usage;
  out["speculative"] = speculative;
  return out;
}

json chunk_json(const ResponseInfo& info, const std::string& text, bool first,
                const std::optional<StopReason>& reason, const json& speculative,
                const json& logprobs) {
  json out = envelope(info, true);
  json choice = {{"index", 0},
                 {"logprobs", logprobs},
                 {"finish_reason", reason ? json(finish_reason(*reason)) : json(nullptr)}};
  if (info.endpoint == Endpoint::chat_completions) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!reason) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  if (!speculative.is_null()) out["speculative"] = speculative;
  return out;
}

json usage_chunk_json(const ResponseInfo& info, const json& usage) {
  json out = envelope(info, true);
  out["choices"] = json::array();
  out["usage"] = usage;
  return out;
}

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace specdec::serve
