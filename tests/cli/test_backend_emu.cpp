// The CLI's CUDA code path end to end, on the emulated CUDA backend: specdec-emu is the CLI linked
// to specdec::cuda_emu (the CUDA sources executed on the CPU), so --backend cuda runs
// SpeculativeDecoder<cuda::Transformer, cuda::Transformer>, the n-gram drafter over a CUDA target
// and AutoregressiveDecoder<cuda::Transformer> with the device sampler, on machines without a GPU.
// Runs are short (the emulator executes every GPU thread on the CPU).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_model.hpp"
#include "cli_test_util.hpp"
#include "specdec_test.hpp"

using nlohmann::json;
using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::read_file;
using specdec::test::run_cli;
using specdec::test::run_program;
namespace fs = std::filesystem;

namespace {

json run_json(const std::vector<std::string>& args, const std::string& program = SPECDEC_CLI) {
  const auto r = run_program(program, args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

std::vector<std::string> generate(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "generate", "-m", demo_target(), "-p", "def copy(x):", "-n",        "10",
      "-c",       "48", "--temp",      "0",  "--json",       "--backend", "cuda"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE(
    "backend cuda (emulated): draft model, n-gram and target-only decoding on the device path",
    "[cli][cuda-emu]") {
  const json base = run_json(generate({"--baseline"}));
  CHECK(base["backend"] == "cuda");
  REQUIRE(base["tokens"].size() == 10);
  // The same greedy tokens as the CPU backend on the same Q8_0 files (the device computes from
  // the file's blocks; these 10 argmaxes are far from ties).
  const json cpu = run_json(generate({"--baseline", "--backend", "cpu"}), SPECDEC_CLI_CPU);
  CHECK(cpu["backend"] == "cpu");
  CHECK(cpu["tokens"] == base["tokens"]);
  for (const std::vector<std::string>& drafter :
       {std::vector<std::string>{"-md", demo_draft(), "-k", "3"},
        std::vector<std::string>{"--ngram", "3"}}) {
    INFO(drafter.front());
    const json spec = run_json(generate(drafter));
    CHECK(spec["backend"] == "cuda");
    CHECK(spec["tokens"] == base["tokens"]);  // greedy: exact on the device path too
    // The device path: the wait for each round lands in verify_seconds, sampling_seconds is 0,
    // and the device sampler reports no p(x) / q(x) (the rounds carry them empty).
    CHECK(spec["stats"]["sampling_seconds"] == 0.0);
    CHECK(spec["stats"]["verify_seconds"].get<double>() > 0.0);
    REQUIRE(!spec["rounds"].empty());
    CHECK(spec["rounds"][0]["p"].empty());
    CHECK(spec["rounds"][0]["q"].empty());
  }
  // Sampled: a run is reproducible from its seed.
  const json a = run_json(generate({"-md", demo_draft(), "--temp", "0.8", "-s", "7"}));
  const json b = run_json(generate({"-md", demo_draft(), "--temp", "0.8", "-s", "7"}));
  CHECK(a["tokens"] == b["tokens"]);
}

TEST_CASE("backend cuda (emulated): suffix decoding verifies token trees on the device",
          "[cli][cuda-emu]") {
  // A prompt that repeats itself, so that the suffix index proposes trees.
  auto with_prompt = [](std::vector<std::string> extra) {
    auto args = generate(std::move(extra));
    args[4] = "def copy(x):\n    return x\ndef copy(x):\n    return x\ndef copy(";
    return args;
  };
  const json base = run_json(with_prompt({"--baseline"}));
  const json spec = run_json(with_prompt({"--suffix"}));
  CHECK(spec["backend"] == "cuda");
  CHECK(spec["tokens"] == base["tokens"]);  // greedy tree speculation is exact on the device
  // The default of 16 nodes is fitted to one step of the CUDA backend's trees (16 with the last
  // token); a larger tree is scored in several steps.
  CHECK(spec["tree_nodes"] == 15);
  bool tree_round = false;
  for (const json& round : spec["rounds"])
    tree_round = tree_round || round.contains("tree_parents");
  CHECK(tree_round);
  // An explicit size past the limit, and draft model trees (read on the host), are refused.
  auto r = run_program(SPECDEC_CLI, with_prompt({"--suffix", "--tree-nodes", "64"}));
  CHECK(r.status == 1);
  CHECK(r.err.find("at most 63 drafted nodes") != std::string::npos);
  r = run_program(SPECDEC_CLI, generate({"-md", demo_draft(), "--tree-nodes", "4"}));
  CHECK(r.status == 1);
  CHECK(r.err.find("draft model trees need the CPU backend") != std::string::npos);
}

TEST_CASE("backend cuda (emulated): penalties and logit bias are refused, naming the way out",
          "[cli][cuda-emu]") {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--repeat-penalty", "1.2", "--baseline"},
        std::vector<std::string>{"-l", "5-inf", "-md", demo_draft()}}) {
    INFO(flags.front());
    const auto r = run_program(SPECDEC_CLI, generate(flags));
    CHECK(r.status == 1);
    CHECK(r.err.find("repetition penalties and logit bias are applied by the host sampler only; "
                     "the device sampler (CUDA backend) does not apply them yet: run on the CPU "
                     "backend") != std::string::npos);
  }
}

TEST_CASE("backend cuda (emulated): the default where a device is present, else the error and cpu",
          "[cli][cuda-emu]") {
  auto r = run_program("/usr/bin/env",
                       {"-u", "SPECDEC_BACKEND", SPECDEC_CLI, "generate", "-m", demo_target(),
                        "--baseline", "-p", "x", "-n", "2", "-c", "16", "--json"});
  REQUIRE(r.status == 0);
  CHECK(json::parse(r.out)["backend"] == "cuda");
  // SPECDEC_EMU_DEVICES=0: the emulated runtime answers as a machine without a GPU.
  r = run_program("/usr/bin/env",
                  {"-u", "SPECDEC_BACKEND", "SPECDEC_EMU_DEVICES=0", SPECDEC_CLI, "generate", "-m",
                   demo_target(), "--baseline", "-p", "x", "-n", "2", "-c", "16", "--json"});
  REQUIRE(r.status == 0);
  CHECK(json::parse(r.out)["backend"] == "cpu");
  r = run_program("/usr/bin/env", {"SPECDEC_EMU_DEVICES=0", SPECDEC_CLI, "generate", "-m",
                                   demo_target(), "--baseline", "-p", "x", "--backend", "cuda"});
  CHECK(r.status == 1);
  CHECK(r.err.find("--backend cuda: no CUDA device is present (cudaGetDeviceCount: "
                   "cudaErrorNoDevice: no CUDA-capable device is detected); use --backend cpu") !=
        std::string::npos);
}

TEST_CASE("backend cuda (emulated): logits are the CPU backend's to f16 rounding",
          "[cli][cuda-emu]") {
  // Both backends on the same F16 weights (the device holds a model's matrices in f16) and an
  // f16 KV cache: they differ only by arithmetic (the backend's own tests allow 1e-3 of a row's
  // largest logit, tests/cuda/transformer_test.cpp).
  const auto f16 = specdec::test::temp_path("-f16.gguf");
  REQUIRE(run_program(SPECDEC_CLI_CPU, {"convert", demo_target(), f16.string(), "--type", "f16"})
              .status == 0);
  const auto gpu = specdec::test::temp_path(".f32");
  const auto cpu = specdec::test::temp_path(".f32");
  const auto logits = [&](const char* program, const fs::path& out, const char* backend) {
    return run_program(program, {"logits", "-m", f16.string(), "--tokens", "1,400,37,1203,9,2000",
                                 "-c", "16", "--cache-type-k", "f16", "--cache-type-v", "f16", "-o",
                                 out.string(), "--backend", backend});
  };
  REQUIRE(logits(SPECDEC_CLI, gpu, "cuda").status == 0);
  REQUIRE(logits(SPECDEC_CLI_CPU, cpu, "cpu").status == 0);
  const std::string a = read_file(gpu), b = read_file(cpu);
  for (const auto& p : {f16, gpu, cpu}) fs::remove(p);
  constexpr std::size_t kVocab = 4096, kRows = 6;
  REQUIRE(a.size() == kRows * kVocab * sizeof(float));
  REQUIRE(b.size() == a.size());
  std::vector<float> x(kRows * kVocab), y(kRows * kVocab);
  std::memcpy(x.data(), a.data(), a.size());
  std::memcpy(y.data(), b.data(), b.size());
  for (std::size_t r = 0; r < kRows; ++r) {
    double diff = 0, scale = 0;
    for (std::size_t v = 0; v < kVocab; ++v) {
      diff = std::max(diff, double(std::abs(x[r * kVocab + v] - y[r * kVocab + v])));
      scale = std::max(scale, double(std::abs(y[r * kVocab + v])));
    }
    INFO("row " << r << ": max difference " << diff << ", largest logit " << scale);
    CHECK(diff <= 1e-3 * scale);
  }
}

TEST_CASE("backend cuda (emulated): chat over the device path, KV reused across turns",
          "[cli][cuda-emu]") {
  const auto target = specdec::test::temp_path("-chat-target.gguf");
  const auto draft = specdec::test::temp_path("-chat-draft.gguf");
  specdec::test::write_chatml_model(demo_target(), target.string());
  specdec::test::write_chatml_model(demo_draft(), draft.string());
  const auto run = [&](std::vector<std::string> extra) {
    const auto file = specdec::test::temp_path(".json");
    std::vector<std::string> args = {"chat", "-m",          target.string(), "--temp", "0",
                                     "-n",   "12",          "--backend",     "cuda",   "-c",
                                     "96",   "--json-file", file.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_program(SPECDEC_CLI, args, std::string("Hello there\nAnd then\n"));
    INFO(r.err);
    REQUIRE(r.status == 0);
    const json j = json::parse(read_file(file));
    fs::remove(file);
    return j;
  };
  const json base = run({"--baseline"});
  const json spec = run({"-md", draft.string(), "-k", "3"});
  fs::remove(target);
  fs::remove(draft);
  REQUIRE(base["turns"].size() == 2);
  CHECK(base["backend"] == "cuda");
  CHECK(spec["tokens"] == base["tokens"]);
  CHECK(spec["messages"] == base["messages"]);
  const std::vector<specdec::token_t> continuation = base["turns"][1]["prompt_tokens"];
  REQUIRE(!continuation.empty());
  if (base["turns"][0]["stop_reason"] == "eos") CHECK(continuation.front() == 13);  // <|im_end|>
  std::size_t total = 0;
  for (const json& t : base["turns"]) total += t["prompt_tokens"].size() + t["tokens"].size();
  CHECK(base["tokens"].size() == total);
}

TEST_CASE("backend cuda (emulated): demo and bench", "[cli][cuda-emu]") {
  auto r = run_program(SPECDEC_CLI,
                       {"demo", "--backend", "cuda", "-n", "6", "--repeat", "1", "-c", "64"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("NO") == std::string::npos);  // greedy speculative == target-only
  r = run_program(SPECDEC_CLI, {"bench", "--backend", "cuda", "--limit", "1", "-n", "6", "--repeat",
                                "1", "-c", "64", "-k", "3"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("CUDA backend") != std::string::npos);
  CHECK(r.out.find("2/2 speculative runs emitted exactly the baseline's tokens") !=
        std::string::npos);
}
