// Bad input gives one clear line on stderr ("specdec: error: ..."), nothing on stdout and the
// exit status docs/cli.md states: 2 for a bad command line (CLI11's message, an unknown flag
// with the nearest known one, a llama.cpp flag specdec does not have, an unwritable output
// path), 1 for everything else (a model that cannot run, memory that does not fit, a full disk).

#include <sys/resource.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec_test.hpp"

using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::run_cli;

namespace {

struct BadCall {
  const char* what;
  std::vector<std::string> args;
  int status;                   ///< expected exit status
  std::string mentions;         ///< the message must contain this
  std::string absent = "\x01";  ///< ... and must not contain this
};

void check_one_line_error(const BadCall& c) {
  const auto r = run_cli(c.args);
  INFO(c.what << "\nstderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.status == c.status);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("specdec: error: ", 0) == 0);
  CHECK(specdec::test::count_lines(r.err) == 1);
  CHECK(r.err.find(c.mentions) != std::string::npos);
  CHECK(r.err.find(c.absent) == std::string::npos);
}

/// The demo target rewritten without one tensor, or without its tokenizer: files that load
/// (info can describe them) but that generate cannot run.
std::filesystem::path demo_target_without(const std::string& tensor, bool tokenizer) {
  const specdec::GgufFile in = specdec::read_gguf(demo_target());
  specdec::GgufWriter w(in.alignment);
  for (const auto& [key, value] : in.metadata)
    if (tokenizer || key.rfind("tokenizer.", 0) != 0) w.set(key, value);
  for (const auto& t : in.tensors)
    if (t.name != tensor)
      w.add_tensor(t.name, *t.dtype, t.shape, std::vector<std::byte>(t.data, t.data + t.nbytes));
  const auto path = specdec::test::temp_path(".gguf");
  w.write(path.string());
  return path;
}

}  // namespace

TEST_CASE("bad command lines give one line and exit status 2", "[cli]") {
  const std::string t = demo_target();
  const std::string d = demo_draft();
  const std::vector<std::string> gen = {"generate", "-m", t, "-md", d, "-p", "x"};
  const auto g = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = gen;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::vector<BadCall> calls = {
      {"no subcommand", {}, 2, "subcommand"},
      {"unknown subcommand", {"generat"}, 2, "did you mean generate?"},
      {"a flag before the subcommand", {"-m", t, "generate"}, 2, "before the subcommand"},
      {"unknown flag, nothing near", g({"--bogus"}), 2, "unknown flag --bogus", "did you mean"},
      {"unknown flag, a typo", g({"--tmp", "0"}), 2, "unknown flag --tmp; did you mean --temp?"},
      {"unknown flag, a typo of an alias", g({"--n-predit", "5"}), 2, "did you mean --n-predict?"},
      {"unknown flag, a prefix", g({"--ctx", "64"}), 2, "did you mean --ctx-size?"},
      {"unknown single-dash name", g({"-xyz"}), 2, "unknown flag -xyz"},
      // A refusal names the flag typed and, for an alias, its long name in llama.cpp.
      {"llama.cpp's -dev", g({"-dev", "CUDA0"}), 2,
       "-dev (llama.cpp's --device) is not supported: specdec runs whole models on one "
       "backend: --backend cuda"},
      {"llama.cpp's --split-mode", g({"--split-mode", "row"}), 2,
       "--split-mode (a llama.cpp flag) is not supported"},
      {"llama.cpp's -nkvo", g({"-nkvo"}), 2,
       "-nkvo (llama.cpp's --no-kv-offload) is not supported"},
      {"llama.cpp's --grammar-file", g({"--grammar-file", "g.gbnf"}), 2,
       "--grammar-file (a llama.cpp flag) is not supported"},
      {"llama.cpp's -j", g({"-j", "{}"}), 2, "-j (llama.cpp's --json-schema) is not supported"},
      {"-l without a sign", g({"-l", "15043"}), 2,
       "--logit-bias: expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1.5, 15043-inf), got "
       "15043"},
      {"-l +inf", g({"-l", "5+inf"}), 2, "a bias of +inf is not a bias (5+inf)"},
      {"-l outside the vocabulary", g({"-l", "999999+1", "--temp", "0"}), 1,
       "logit bias for token 999999, outside the vocabulary (4096 tokens)"},
      {"a bad repeat penalty", g({"--repeat-penalty", "0"}), 2,
       "--repeat-penalty: the repeat penalty must be finite and > 0 (1: off), got 0"},
      {"a bad penalty window", g({"--repeat-last-n", "-2"}), 2,
       "--repeat-last-n: must be -1 (the whole context) or a whole number >= 0, got -2"},
      {"a non-finite presence penalty", g({"--presence-penalty", "nan"}), 2,
       "the presence penalty must be a finite number, got nan"},
      {"-ngl on a command without --backend",
       {"info", t, "-ngl", "0"},
       2,
       "-ngl (llama.cpp's --n-gpu-layers) is not supported"},
      {"a llama.cpp flag without its value", g({"--grammar"}), 2, "--grammar needs a value"},
      {"a bad verbosity", g({"-lv", "high"}), 2, "-lv: the verbosity is a whole number"},
      {"llama-bench's -p",
       {"bench", "-m", t, "-md", d, "-p", "512"},
       2,
       "-p (llama.cpp's --n-prompt) is not supported: llama-bench's prompt length"},
      {"convert of a folder",
       {"convert", std::filesystem::path(t).parent_path().string(), "/tmp/never-written.gguf",
        "--type", "q8_0"},
       2,
       "is a folder: convert rewrites .gguf files"},
      {"a folder that is not a model",
       {"generate", "-m", std::filesystem::path(t).parent_path().string(), "-p", "x"},
       1,
       "a folder without config.json, so not a Hugging Face model folder (config.json + "
       "model.safetensors); it holds"},
      {"llama.cpp's --mlock", g({"--mlock"}), 2, "memory-mapped"},
      {"llama.cpp's -cnv", g({"-cnv"}), 2, "specdec chat is the conversation mode"},
      {"llama.cpp's --mirostat", g({"--mirostat", "2"}), 2,
       "--mirostat (a llama.cpp flag) is not supported: specdec samples with --temp, "
       "--top-k, --top-p"},
      {"llama.cpp's -no-cnv in chat",
       {"chat", "-m", t, "-no-cnv"},
       2,
       "specdec chat is always a conversation"},
      {"llama.cpp's -hf", g({"-hf", "org/model"}), 2, "does not download"},
      {"llama.cpp's -ctkd", g({"-ctkd", "f16"}), 2, "both models"},
      {"llama.cpp's --draft N",
       {"generate", "-m", t, "--draft", "16", "-p", "x"},
       2,
       "use --draft-max 16"},
      {"-md on a command without a draft", {"logits", "-m", t, "-md", d}, 2, "unknown flag -md"},
      {"missing target file",
       {"generate", "-m", "/nonexistent/t.gguf", "-p", "x", "--baseline"},
       2,
       "/nonexistent/t.gguf"},
      {"missing prompt file",
       {"generate", "-m", t, "-f", "/nonexistent/p.txt", "--baseline"},
       2,
       "/nonexistent/p.txt"},
      {"no prompt", {"generate", "-m", t, "--baseline"}, 2, "-p TEXT or -f FILE"},
      {"k = 0", g({"-k", "0"}), 2, "--draft-max"},
      {"--draft-min above --draft-max", g({"--draft-max", "4", "--draft-min", "5"}), 2,
       "--draft-min 5 is more than --draft-max 4"},
      // Draft model trees' shape needs draft model trees; --suffix with -md verifies trees.
      {"--tree-topk with chains", g({"--tree-topk", "3"}), 2,
       "--tree-topk, --tree-depth, --draft-p-min and --draft-p-split shape draft model trees"},
      {"--draft-p-min with chains", g({"--draft-p-min", "0.5"}), 2,
       "give -md MODEL and --tree-nodes N (or --suffix)"},
      {"--draft-p-split above 1", g({"--tree-nodes", "8", "--draft-p-split", "1.5"}), 2,
       "--draft-p-split"},
      {"--suffix -md with chains", g({"--suffix", "--tree-nodes", "0"}), 2,
       "--suffix with a draft model (-md) verifies trees: --tree-nodes must be at least 1"},
      {"negative temperature", g({"--temp=-1"}), 2, "temperature"},
      {"top-p above 1", g({"--top-p", "1.5"}), 2, "top-p"},
      {"top-p 0", g({"--top-p", "0"}), 2, "top-p"},
      {"-n -3", g({"-n", "-3"}), 2, "-1 (until EOS or the context is full)"},
      {"-s -5", g({"-s", "-5"}), 2, "-1 (a random seed)"},
      {"-s 2^64", g({"-s", "18446744073709551616"}), 2, "[0, 2^64)"},
      {"-t 2000", g({"-t", "2000"}), 2, "--threads"},
      {"-c -1", g({"-c", "-1"}), 2, "--ctx-size"},
      {"a KV cache type llama.cpp has", g({"-ctk", "q8_0", "-ctv", "q8_0"}), 2,
       "q8_0 is a llama.cpp KV cache type"},
      {"different K and V cache types", g({"--cache-type-k", "f16", "--cache-type-v", "f32"}), 2,
       "stores keys and values in one type"},
      {"--color with a bad value", g({"--color", "blue"}), 2, "blue"},
      {"draft and ngram",
       {"generate", "-m", t, "-md", d, "--ngram", "3", "-p", "x"},
       2,
       "excludes"},
      {"prompt and prompt file",
       {"generate", "-m", t, "--baseline", "-p", "x", "-f", t},
       2,
       "excludes"},
      {"unwritable --trace", g({"--trace", "/nonexistent/dir/t.html"}), 2,
       "--trace /nonexistent/dir/t.html: cannot open for writing: No such file or directory"},
      {"unwritable --json-file", g({"--json-file", "/nonexistent/dir/t.json"}), 2,
       "--json-file /nonexistent/dir/t.json: cannot open for writing"},
      {"unwritable logits --out",
       {"logits", "-m", t, "--tokens", "1,2", "--out", "/nonexistent/x"},
       2,
       "--out /nonexistent/x: cannot open for writing"},
      {"unwritable convert output",
       {"convert", t, "/nonexistent/dir/o.gguf", "--type", "f16"},
       2,
       "cannot open for writing"},
      {"non-numeric token",
       {"logits", "-m", t, "--tokens", "1,a", "--out", "/dev/null"},
       2,
       "--tokens"},
      {"unknown convert type", {"convert", t, "/dev/null", "--type", "iq2_xs"}, 2, "iq2_xs"},
      {"info without a file", {"info"}, 2, "file"},
  };
  for (const auto& c : calls) check_one_line_error(c);
}

TEST_CASE("an output path that cannot be written is refused before the models load", "[cli]") {
  // Nothing is generated (stdout stays empty) and no stats line is printed; a path the command
  // created for the check is removed again when the command fails before writing it.
  const auto json = specdec::test::temp_path(".json");
  const auto r = run_cli({"generate", "-m", demo_target(), "--baseline", "-p", "x", "--json-file",
                          json.string(), "--trace", "/nonexistent/dir/t.html"});
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(!std::filesystem::exists(json));
}

TEST_CASE("invalid requests give one line and exit status 1", "[cli]") {
  const std::string t = demo_target();
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "the LORD ";
  const auto not_a_model = specdec::test::temp_path(".txt");
  std::ofstream(not_a_model) << "hello, I am not a model\n";
  // The demo target claiming a context of 2^31 - 1 positions: -c 0 asks for all of them.
  const auto huge = specdec::test::patched_gguf(t, "llama.context_length", 2147483647u);
  const std::vector<BadCall> calls = {
      {"prompt longer than the context",
       {"generate", "-m", t, "--baseline", "-p", long_prompt},
       1,
       "context"},
      {"token id outside the vocabulary",
       {"logits", "-m", t, "--tokens", "1,4096", "--out", "/dev/null"},
       1,
       "4096"},
      {"negative token id", {"logits", "-m", t, "--tokens", "-5", "--out", "/dev/null"}, 1, "-5"},
      {"not a model file", {"info", not_a_model.string()}, 1, not_a_model.string()},
      {"draft with another vocabulary",
       {"generate", "-m", t, "-md", std::string(SPECDEC_TEST_DATA) + "/model/tiny-llama-q8_0.gguf",
        "-p", "x"},
       1,
       "vocabulary"},
      {"convert onto its input", {"convert", t, t, "--type", "q8_0"}, 1, "input"},
      {"demo models not found", {"demo", "--models-dir", "/nonexistent"}, 1, "/nonexistent"},
      {"a context that does not fit in memory",
       {"generate", "-m", huge.string(), "--baseline", "-p", "x", "-c", "0"},
       1,
       "the KV cache needs 9.0 TiB (target 2147483647 positions, 9.0 TiB) but "},
      {"... names -c",
       {"generate", "-m", huge.string(), "--baseline", "-p", "x", "-c", "0"},
       1,
       "give a shorter context with -c N"},
      {"... and f16 when the cache is f32",
       {"generate", "-m", huge.string(), "--baseline", "-p", "x", "-c", "0"},
       1,
       "--cache-type-k f16 --cache-type-v f16"},
  };
  for (const auto& c : calls) check_one_line_error(c);

  // The same model runs with the default context (its claim capped at 4096 positions).
  const auto r = run_cli(
      {"generate", "-m", huge.string(), "--baseline", "-p", "x", "-n", "4", "-s", "1", "--json"});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.err.empty());  // no warning (and no random seed: -s is given)
  CHECK(specdec::test::parse_json_output(r)["context_length"] == 4096);
  std::filesystem::remove(not_a_model);
  std::filesystem::remove(huge);
}

TEST_CASE("info on a file generate cannot run says so after the description, status 1", "[cli]") {
  const auto no_norm = demo_target_without("output_norm.weight", true);
  const auto no_tokenizer = demo_target_without("", false);
  for (const auto& [file, reason] :
       {std::pair{no_norm, std::string("output_norm.weight")},
        std::pair{no_tokenizer, std::string("carries no tokenizer")}}) {
    const auto r = run_cli({"info", file.string()});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.out.find("blk.0.attn_q.weight") != std::string::npos);  // the table was printed
    CHECK(r.err.rfind(
              "specdec: error: " + file.string() + ": specdec generate cannot run this model: ",
              0) == 0);
    CHECK(r.err.find(reason) != std::string::npos);
    CHECK(specdec::test::count_lines(r.err) == 1);
    std::filesystem::remove(file);
  }
  CHECK(run_cli({"info", demo_target()}).status == 0);
}

TEST_CASE("write errors give exit status 1, stdout included", "[cli]") {
  const std::vector<std::string> gen = {"generate", "-m", demo_target(), "-md", demo_draft(),
                                        "-p",       "x",  "-n",          "8"};
  for (const auto& [args, redirect] :
       {std::pair{gen, std::string("> /dev/full")},
        std::pair{std::vector<std::string>{"info", demo_target()}, std::string("> /dev/full")}}) {
    for (const bool json : {false, true}) {
      auto a = args;
      if (json && a[0] == "generate") a.emplace_back("--json");
      const auto r = specdec::test::run_cli_redirected(a, redirect);
      INFO(a[0] << " " << json << "\n" << r.err);
      CHECK(r.status == 1);
      CHECK(r.err.find("specdec: error: cannot write to stdout: No space left on device") !=
            std::string::npos);
    }
  }
  // A trace to a full disk: the run itself completes (stats on stderr), then the write fails.
  auto a = gen;
  a.insert(a.end(), {"--trace", "/dev/full"});
  const auto r = run_cli(a);
  CHECK(r.status == 1);
  CHECK(r.err.find("stop: max_tokens") != std::string::npos);
  CHECK(r.err.find("specdec: error: --trace /dev/full: write failed: No space left on device") !=
        std::string::npos);
}

TEST_CASE("too many threads under a memory limit: a clear error, not an abort", "[cli]") {
#if defined(__SANITIZE_ADDRESS__)
  WARN(
      "SKIPPED under AddressSanitizer: its shadow memory cannot start under ulimit -v "
      "(tests/cpu covers the ThreadPool in a forked child under RLIMIT_AS)");
#else
  // 1 GiB of address space: room for the models and some thread stacks (8 MiB each), not 1023.
  const auto r = specdec::test::run_program(
      "/bin/sh", {"-c", "ulimit -v 1048576 && exec " + specdec::test::shell_quote(SPECDEC_CLI) +
                            " generate -m " + specdec::test::shell_quote(demo_target()) +
                            " --baseline -p x -n 4 -t 1024"});
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("specdec: warning: 1024 threads for the target but this process may use ") !=
        std::string::npos);
  CHECK(r.err.find("specdec: error: ThreadPool: cannot start thread ") != std::string::npos);
  CHECK(r.err.find(" of 1024: Resource temporarily unavailable") != std::string::npos);
  CHECK(r.err.find("terminate") == std::string::npos);
#endif
}
