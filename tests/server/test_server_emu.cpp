// `specdec serve --backend cuda` on the emulated CUDA backend (specdec-emu: the CLI linked to
// specdec::cuda_emu, which runs the CUDA sources on the CPU): the library's engine over
// cuda::Transformer slots (one device round per slot) answers the OpenAI chat and completions
// APIs with the tokens the CPU server gives, for the draft-model, n-gram and target-only setups,
// with two requests at once; what the device sampler lacks (logprobs, penalties) is refused with
// a 400 that names the field. Label cuda-emu.
#include <future>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server_test_util.hpp"

using nlohmann::json;
using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::post;
using specdec::test::ServerProcess;

namespace {

/// A short context: the emulator runs every GPU thread on the CPU.
std::vector<std::string> server_args(std::vector<std::string> drafter, const std::string& backend) {
  std::vector<std::string> args = {"-m",     demo_target(), "-c", "96",        "--chat-template",
                                   "chatml", "--parallel",  "2",  "--backend", backend};
  args.insert(args.end(), drafter.begin(), drafter.end());
  return args;
}

json chat_body(const std::string& user, int max_tokens) {
  return {{"messages", {{{"role", "user"}, {"content", user}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

}  // namespace

TEST_CASE("serve --backend cuda answers with the CPU server's tokens", "[cuda-emu][serve]") {
  const std::vector<std::vector<std::string>> drafters = {
      {"-md", demo_draft()}, {"--ngram", "3"}, {}};
  for (const auto& drafter : drafters) {
    INFO((drafter.empty() ? std::string("target only") : drafter[0]));
    ServerProcess cuda(server_args(drafter, "cuda"));
    ServerProcess cpu(server_args(drafter, "cpu"), SPECDEC_CLI_CPU);
    INFO(cuda.err());
    CHECK_THAT(cuda.err(), Catch::Contains("cuda backend"));

    // Two chat requests at once (both slots busy), then a completion.
    const json a = chat_body("def copy(x):", 8), b = chat_body("class Stack:", 8);
    auto ra = std::async(std::launch::async,
                         [&] { return post(cuda, "/v1/chat/completions", a.dump()); });
    auto rb = std::async(std::launch::async,
                         [&] { return post(cuda, "/v1/chat/completions", b.dump()); });
    const auto got_a = ra.get(), got_b = rb.get();
    for (const auto& [body, got] : {std::pair{a, got_a}, std::pair{b, got_b}}) {
      REQUIRE(got.status == 200);
      const auto expected = post(cpu, "/v1/chat/completions", body.dump());
      REQUIRE(expected.status == 200);
      CHECK(got.json["choices"][0]["message"]["content"] ==
            expected.json["choices"][0]["message"]["content"]);
      CHECK(got.json["usage"] == expected.json["usage"]);
    }
    const json completion = {{"prompt", "def add(a, b):"}, {"max_tokens", 6}, {"temperature", 0}};
    const auto got = post(cuda, "/v1/completions", completion.dump());
    const auto expected = post(cpu, "/v1/completions", completion.dump());
    REQUIRE(got.status == 200);
    CHECK(got.json["choices"][0]["text"] == expected.json["choices"][0]["text"]);
  }

  ServerProcess cuda(server_args({}, "cuda"));
  json with_logprobs = chat_body("x", 2);
  with_logprobs["logprobs"] = true;
  const auto refused = post(cuda, "/v1/chat/completions", with_logprobs.dump());
  CHECK(refused.status == 400);
  CHECK(refused.json["error"]["param"] == "logprobs");
  CHECK(refused.json["error"]["code"] == "unsupported_on_backend");
}
