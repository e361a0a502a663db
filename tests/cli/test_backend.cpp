// --backend cpu|cuda on the CLI built for the CPU alone or with nvcc (SPECDEC_CLI_HAS_CUDA): the
// flag and SPECDEC_BACKEND are checked, and where the CUDA backend cannot run (no nvcc at build
// time, no device) the error says why. The CUDA code path itself runs end to end on the emulated
// backend in test_backend_emu.cpp (label cuda-emu).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "specdec_test.hpp"

using specdec::test::demo_target;
using specdec::test::run_cli;
using specdec::test::run_program;

namespace {

/// specdec with `env` ("NAME=value" or "-u NAME" pairs for env(1)) in its environment.
specdec::test::RunResult run_with_env(std::vector<std::string> env,
                                      const std::vector<std::string>& args) {
  env.push_back(SPECDEC_CLI);
  env.insert(env.end(), args.begin(), args.end());
  return run_program("/usr/bin/env", env);
}

const std::vector<std::string> kGenerate = {"generate", "-m", demo_target(), "--baseline", "-p",
                                            "def f",    "-n", "3",           "--json"};

}  // namespace

TEST_CASE("backend flag: cpu runs, cuda runs or says why it cannot, anything else is refused",
          "[cli][backend]") {
  auto args = kGenerate;
  args.insert(args.end(), {"--backend", "cpu"});
  auto r = run_cli(args);
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.out)["backend"] == "cpu");

  args.back() = "gpu";
  r = run_cli(args);
  CHECK(r.status == 2);
  CHECK(r.err.find("--backend") != std::string::npos);

  args.back() = "cuda";
  r = run_cli(args);
  INFO(r.err);
  if (SPECDEC_CLI_HAS_CUDA) {
    // On a machine with a GPU it runs; without one the error carries cudaGetDeviceCount's answer.
    if (r.status == 0) {
      CHECK(nlohmann::json::parse(r.out)["backend"] == "cuda");
    } else {
      CHECK(r.status == 1);
      CHECK(r.err.find("--backend cuda: no CUDA device is present (cudaGetDeviceCount: ") !=
            std::string::npos);
      CHECK(r.err.find("use --backend cpu") != std::string::npos);
    }
  } else {
    CHECK(r.status == 1);
    CHECK(r.err.find("--backend cuda: this specdec was built without the CUDA backend") !=
          std::string::npos);
  }
}

TEST_CASE("backend flag: SPECDEC_BACKEND sets the default and the flag wins", "[cli][backend]") {
  auto r = run_with_env({"SPECDEC_BACKEND=cpu"}, kGenerate);
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(r.out)["backend"] == "cpu");
  r = run_with_env({"SPECDEC_BACKEND=tpu"}, kGenerate);
  CHECK(r.status == 2);
  CHECK(r.err.find("SPECDEC_BACKEND tpu: the backends are cpu and cuda") != std::string::npos);
  auto args = kGenerate;
  args.insert(args.end(), {"--backend", "cpu"});
  r = run_with_env({"SPECDEC_BACKEND=tpu"}, args);
  CHECK(r.status == 0);
  r = run_with_env({"-u", "SPECDEC_BACKEND"}, kGenerate);  // the built-in default
  REQUIRE(r.status == 0);
  if (!SPECDEC_CLI_HAS_CUDA) CHECK(nlohmann::json::parse(r.out)["backend"] == "cpu");
}

TEST_CASE("backend flag: every model-running subcommand takes it and -ngl points to it",
          "[cli][backend]") {
  for (const char* command : {"generate", "chat", "bench", "demo", "logits"}) {
    INFO(command);
    const auto r = run_cli({command, "--help"});
    CHECK(r.status == 0);
    CHECK(r.out.find("--backend") != std::string::npos);
  }
  // llama.cpp's -ngl N > 0 asks for the GPU: it runs, and the note says that --backend decides.
  const auto r = run_cli({"generate", "-m", demo_target(), "--baseline", "-p", "x", "-ngl", "99"});
  CHECK(r.status == 0);
  CHECK(r.err.find("specdec: note: -ngl 99: ignored: specdec runs whole models on one backend: "
                   "--backend cuda puts target and draft") != std::string::npos);
}
