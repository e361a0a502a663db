// The OpenAI API of the serving library (specdec/serve/api.hpp) as functions on JSON, without a
// server: request bodies parsed field by field (defaults, both endpoints' forms, every refusal
// naming its field and code) and the response objects' shape. The same API through a running
// `specdec serve` and the real `openai` client is tests/server/.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/serve/api.hpp"

using namespace specdec;
using namespace specdec::serve;
using json = nlohmann::json;

namespace {

CompletionRequest completion(const json& body) {
  return parse_request(body.dump(), Endpoint::completions, "m");
}
CompletionRequest chat(const json& body) {
  return parse_request(body.dump(), Endpoint::chat_completions, "m");
}

/// The ApiError a body gets, as "param/code".
std::string refusal_of_text(const std::string& body, Endpoint endpoint = Endpoint::completions) {
  try {
    (void)parse_request(body, endpoint, "m");
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.param + "/" + e.code;
  }
  return "accepted";
}
std::string refusal(const json& body, Endpoint endpoint = Endpoint::completions) {
  return refusal_of_text(body.dump(), endpoint);
}

}  // namespace

TEST_CASE("completion requests: the defaults and the fields", "[serve][api]") {
  const CompletionRequest r = completion({{"prompt", "hello"}});
  CHECK(r.endpoint == Endpoint::completions);
  CHECK(r.prompt == "hello");
  CHECK(r.max_tokens == 16);  // OpenAI's default for /v1/completions
  CHECK(r.sampling.temperature == 1.0f);
  CHECK_FALSE(r.seed.has_value());
  CHECK_FALSE(r.logprobs.has_value());
  CHECK_FALSE(r.stream);

  const CompletionRequest full =
      completion({{"model", "m"},
                  {"prompt", json::array({json::array({1, 2, 3})})},
                  {"max_tokens", -1},
                  {"temperature", 0},
                  {"top_p", 0.5},
                  {"top_k", 7},
                  {"min_p", 0.1},
                  {"seed", 42},
                  {"stop", "\n"},
                  {"presence_penalty", 0.5},
                  {"frequency_penalty", -1},
                  {"logit_bias", {{"5", -100}, {"9", 2.5}}},
                  {"logprobs", 3},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}},
                  {"repetition_penalty", 1.0},  // the neutral value vLLM clients send
                  {"n", 1},
                  {"user", "u"}});
  REQUIRE(full.prompt_ids.has_value());
  CHECK(*full.prompt_ids == std::vector<std::int64_t>{1, 2, 3});
  CHECK_FALSE(full.max_tokens.has_value());  // -1: until the end of the text
  CHECK(full.sampling.temperature == 0.0f);
  CHECK(full.sampling.top_p == 0.5f);
  CHECK(full.sampling.top_k == 7);
  CHECK(full.sampling.min_p == Approx(0.1f));
  CHECK(full.seed == 42u);
  CHECK(full.stop == std::vector<std::string>{"\n"});
  CHECK(full.penalties.presence == 0.5f);
  CHECK(full.penalties.frequency == -1.0f);
  CHECK(full.penalties.scope == sampling::PenaltyScope::completion);
  REQUIRE(full.penalties.logit_bias.size() == 2);
  CHECK(full.penalties.logit_bias[0].token == 5);
  CHECK(full.penalties.logit_bias[0].bias == -100.0f);
  CHECK(full.logprobs == 3u);
  CHECK(full.stream);
  CHECK(full.include_usage);
}

TEST_CASE("chat requests: messages, logprobs as a flag and top_logprobs", "[serve][api]") {
  const CompletionRequest r =
      chat({{"messages",
             {{{"role", "system"}, {"content", "be brief"}},
              {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}},
            {"max_completion_tokens", 5},
            {"logprobs", true},
            {"top_logprobs", 2}});
  REQUIRE(r.messages.size() == 2);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "hi");
  CHECK(r.max_tokens == 5);
  CHECK(r.logprobs == 2u);
  CHECK_FALSE(chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}}).max_tokens.has_value());
}

TEST_CASE("bad requests are refused naming the field", "[serve][api]") {
  const json msgs = {{{"role", "user"}, {"content", "x"}}};
  CHECK(refusal_of_text("{not json") == "/invalid_json");
  CHECK(refusal(json::array()) == "body/invalid_type");
  CHECK(refusal(json::object()) == "prompt/missing_required_parameter");
  CHECK(refusal({{"prompt", ""}}) == "prompt/invalid_value");
  CHECK(refusal({{"prompt", 5}}) != "accepted");
  CHECK(refusal({{"prompt", "x"}, {"model", "other"}}) == "model/model_not_found");
  CHECK(refusal({{"prompt", "x"}, {"temperature", "hot"}}) == "temperature/invalid_type");
  CHECK(refusal({{"prompt", "x"}, {"temperature", 2.5}}) == "temperature/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"top_p", 0}}) == "top_p/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"top_k", -1}}) == "top_k/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"min_p", 1.5}}) == "min_p/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"max_tokens", -2}}) == "max_tokens/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"seed", -2}}) == "seed/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"seed", 1.5}}) == "seed/invalid_type");
  CHECK(refusal({{"prompt", "x"}, {"stop", json::array({""})}}) == "stop/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"stop", std::vector<std::string>(17, "a")}}) ==
        "stop/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"n", 2}}) == "n/unsupported_value");
  CHECK(refusal({{"prompt", "x"}, {"echo", true}}) == "echo/unsupported_parameter");
  CHECK(refusal({{"prompt", "x"}, {"repetition_penalty", 1.1}}) ==
        "repetition_penalty/unsupported_parameter");
  CHECK(refusal({{"prompt", "x"}, {"presence_penalty", 3}}) == "presence_penalty/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"logit_bias", {{"a", 1}}}}) == "logit_bias/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"logit_bias", {{"1", 101}}}}) == "logit_bias.1/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"logprobs", 21}}) == "logprobs/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"top_logprobs", 2}}) == "top_logprobs/unsupported_parameter");
  CHECK(refusal({{"prompt", "x"}, {"stream_options", 1}}) == "stream_options/invalid_type");
  CHECK(refusal({{"messages", msgs}, {"top_logprobs", 2}}, Endpoint::chat_completions) ==
        "top_logprobs/invalid_value");
  CHECK(refusal({{"messages", json::array()}}, Endpoint::chat_completions) ==
        "messages/invalid_value");
  CHECK(refusal({{"messages", {{{"content", "x"}}}}}, Endpoint::chat_completions) ==
        "messages[0].role/missing_required_parameter");
  CHECK(refusal({{"messages", msgs}, {"tools", json::array({1})}}, Endpoint::chat_completions) ==
        "tools/unsupported_parameter");
}

TEST_CASE("sampling settings are checked as the floats the sampler gets", "[serve][api]") {
  // top_p 1e-300 is a positive double but float 0: refused, not a 500 later on.
  CHECK(refusal({{"prompt", "x"}, {"top_p", 1e-300}}) == "top_p/invalid_value");
  CHECK(refusal({{"prompt", "x"}, {"min_p", 1e-300}}) == "accepted");  // float 0: min-p off
  // A temperature below float arithmetic's reach is accepted and sampled greedily (the limit).
  for (const double t : {1e-39, 1e-45, 1e-300}) {
    const CompletionRequest r = completion({{"prompt", "x"}, {"temperature", t}});
    CHECK(r.sampling.greedy());
  }
  CHECK_FALSE(completion({{"prompt", "x"}, {"temperature", 1e-5}}).sampling.greedy());
}

TEST_CASE("errors quote at most a few hundred bytes of what was sent", "[serve][api]") {
  const std::string huge(1 << 20, 'x');
  const auto message_of = [](const json& body, Endpoint endpoint) {
    try {
      (void)parse_request(body.dump(), endpoint, "m");
    } catch (const ApiError& e) {
      return std::string(e.what()) + " | " + e.param;
    }
    return std::string("accepted");
  };
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  for (const auto& [body, endpoint] : std::vector<std::pair<json, Endpoint>>{
           {{{"prompt", "x"}, {"model", huge}}, Endpoint::completions},
           {{{"prompt", "x"}, {"stop", json::array({huge, ""})}}, Endpoint::completions},
           {{{"prompt", "x"}, {"logit_bias", {{huge, 1}}}}, Endpoint::completions},
           {{{"messages", json::array({{{"role", huge}, {"content", "x"}}})}},
            Endpoint::chat_completions},
           {{{"messages",
              json::array({{{"role", "user"}, {"content", json::array({{{"type", huge}}})}}})}},
            Endpoint::chat_completions},
           {{{"messages", msgs}, {"temperature", json::array({huge})}},
            Endpoint::chat_completions}}) {
    const std::string message = message_of(body, endpoint);
    INFO(message.substr(0, 300));
    CHECK(message != "accepted");
    CHECK(message.size() < 1300);
  }
  CHECK(message_of({{"prompt", "x"}, {"model", huge}}, Endpoint::completions)
            .find("... (1048576 bytes)") != std::string::npos);
  // Cut on a character boundary: 'é' is two bytes; 200 bytes would split the 101st.
  const std::string accents = std::string("a") + [] {
    std::string s;
    for (int i = 0; i < 300; ++i) s += "\xc3\xa9";
    return s;
  }();
  const std::string cut = excerpt(accents);
  CHECK(cut.rfind("a\xc3\xa9", 0) == 0);
  CHECK(cut.substr(0, cut.find("...")).size() == 199);  // 'a' + 99 whole characters
  CHECK(excerpt("short") == "short");
}

TEST_CASE("responses and chunks have OpenAI's shape", "[serve][api]") {
  ResponseInfo info{"cmpl-1", 7, "m", Endpoint::completions};
  const json usage = usage_json(3, 4);
  CHECK(usage == json{{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}});
  const json whole = response_json(info, "abc", StopReason::max_tokens, usage, json::object());
  CHECK(whole["object"] == "text_completion");
  CHECK(whole["choices"][0]["text"] == "abc");
  CHECK(whole["choices"][0]["finish_reason"] == "length");
  CHECK(whole["choices"][0]["logprobs"].is_null());
  CHECK(whole["usage"] == usage);

  info.endpoint = Endpoint::chat_completions;
  const json first = chunk_json(info, "a", true, std::nullopt);
  CHECK(first["object"] == "chat.completion.chunk");
  CHECK(first["choices"][0]["delta"]["role"] == "assistant");
  CHECK(first["choices"][0]["delta"]["content"] == "a");
  const json last = chunk_json(info, "", false, StopReason::eos);
  CHECK(last["choices"][0]["finish_reason"] == "stop");
  CHECK(sse_event(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
  CHECK(finish_reason(StopReason::cancelled) == "cancelled");
}
