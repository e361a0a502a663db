// specdec: the command-line interface. One executable, one subcommand per job:
//
//   specdec demo                          the bundled pair, streamed, with a speedup table
//   specdec generate --target T ...       generate text (speculative or --baseline)
//   specdec bench --target T --draft D    baseline vs speculative on many prompts, one table
//   specdec info FILE                     what a model file holds
//   specdec logits --model M --tokens ..  raw logits of one forward, for conformance checks
//   specdec convert IN OUT --type q8_0    rewrite a GGUF's weights as Q8_0 or F16
//
// docs/cli.md documents every option. Errors are one line on stderr, "specdec: error: ...",
// with exit status 2 for bad command lines (CLI11's message) and 1 for everything else.

#include <cstdio>
#include <exception>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "specdec/common.hpp"
#include "specdec/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"specdec " SPECDEC_VERSION_STRING
               ": exact speculative decoding for Llama-family models",
               "specdec"};
  app.set_version_flag("--version", SPECDEC_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // --help after a subcommand's options still works
  specdec::cli::add_demo(app);
  specdec::cli::add_generate(app);
  specdec::cli::add_bench(app);
  specdec::cli::add_info(app);
  specdec::cli::add_logits(app);
  specdec::cli::add_convert(app);
  specdec::cli::add_tokenize(app);

  specdec::cli::set_command_line(argc, argv);
  try {
    app.parse(argc, argv);  // the chosen subcommand runs inside, from its callback
    return 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fflush(stdout);
    fmt::print(stderr, "specdec: error: {} (see --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // specdec::Error and anything unexpected
    std::fflush(stdout);
    fmt::print(stderr, "specdec: error: {}\n", e.what());
    return 1;
  }
}
