// Bad input gives one clear line on stderr ("specdec: error: ..."), nothing on stdout and a
// non-zero exit status: 2 for a bad command line (CLI11's message), 1 for everything else.

#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec_test.hpp"

using specdec::test::demo_draft;
using specdec::test::demo_target;
using specdec::test::run_cli;

namespace {

struct BadCall {
  const char* what;
  std::vector<std::string> args;
  int status;            ///< expected exit status
  std::string mentions;  ///< the message must contain this
};

void check_one_line_error(const BadCall& c) {
  const auto r = run_cli(c.args);
  INFO(c.what << "\nstderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.status == c.status);
  CHECK(r.out.empty());
  CHECK(r.err.rfind("specdec: error: ", 0) == 0);
  CHECK(specdec::test::count_lines(r.err) == 1);
  CHECK(r.err.find(c.mentions) != std::string::npos);
}

}  // namespace

TEST_CASE("bad command lines give CLI11's message on one line and exit status 2", "[cli]") {
  const std::string t = demo_target();
  const std::vector<BadCall> calls = {
      {"no subcommand", {}, 2, "subcommand"},
      {"unknown flag",
       {"generate", "--target", t, "--prompt", "x", "--baseline", "--bogus"},
       2,
       "--bogus"},
      {"missing target file",
       {"generate", "--target", "/nonexistent/t.gguf", "--prompt", "x", "--baseline"},
       2,
       "/nonexistent/t.gguf"},
      {"missing prompt file",
       {"generate", "--target", t, "--prompt-file", "/nonexistent/p.txt", "--baseline"},
       2,
       "/nonexistent/p.txt"},
      {"k = 0", {"generate", "--target", t, "--baseline", "--prompt", "x", "-k", "0"}, 2, "-k"},
      {"negative temperature",
       {"generate", "--target", t, "--baseline", "--prompt", "x", "--temp=-1"},
       2,
       "temperature"},
      {"top-p above 1",
       {"generate", "--target", t, "--baseline", "--prompt", "x", "--top-p", "1.5"},
       2,
       "top-p"},
      {"top-p 0",
       {"generate", "--target", t, "--baseline", "--prompt", "x", "--top-p", "0"},
       2,
       "top-p"},
      {"negative token budget",
       {"generate", "--target", t, "--baseline", "--prompt", "x", "-n", "-3"},
       2,
       ">= 0"},
      {"draft and ngram",
       {"generate", "--target", t, "--draft", demo_draft(), "--ngram", "3", "--prompt", "x"},
       2,
       "excludes"},
      {"prompt and prompt file",
       {"generate", "--target", t, "--baseline", "--prompt", "x", "--prompt-file", t},
       2,
       "excludes"},
      {"non-numeric token",
       {"logits", "--model", t, "--tokens", "1,a", "--out", "/dev/null"},
       2,
       "--tokens"},
      {"unknown convert type", {"convert", t, "/dev/null", "--type", "iq2_xs"}, 2, "iq2_xs"},
      {"info without a file", {"info"}, 2, "file"},
  };
  for (const auto& c : calls) check_one_line_error(c);
}

TEST_CASE("invalid requests give one line and exit status 1", "[cli]") {
  const std::string t = demo_target();
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "the LORD ";
  const auto not_a_model = specdec::test::temp_path(".txt");
  std::ofstream(not_a_model) << "hello, I am not a model\n";
  const std::vector<BadCall> calls = {
      {"prompt longer than the context",
       {"generate", "--target", t, "--baseline", "--prompt", long_prompt},
       1,
       "context"},
      {"no drafter", {"generate", "--target", t, "--prompt", "x"}, 1, "--baseline"},
      {"token id outside the vocabulary",
       {"logits", "--model", t, "--tokens", "1,4096", "--out", "/dev/null"},
       1,
       "4096"},
      {"negative token id",
       {"logits", "--model", t, "--tokens", "-5", "--out", "/dev/null"},
       1,
       "-5"},
      {"not a model file", {"info", not_a_model.string()}, 1, not_a_model.string()},
      {"draft with another vocabulary",
       {"generate", "--target", t, "--draft",
        std::string(SPECDEC_TEST_DATA) + "/model/tiny-llama-q8_0.gguf", "--prompt", "x"},
       1,
       "vocabulary"},
      {"convert onto its input", {"convert", t, t, "--type", "q8_0"}, 1, "input"},
      {"demo models not found", {"demo", "--models-dir", "/nonexistent"}, 1, "/nonexistent"},
  };
  for (const auto& c : calls) check_one_line_error(c);
  std::filesystem::remove(not_a_model);
}
