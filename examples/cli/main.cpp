// specdec: the command-line interface. One executable, one subcommand per job:
//
//   specdec demo                          the bundled pair, streamed, with a speedup table
//   specdec generate -m T -md D -p TEXT   generate text (speculative or --baseline)
//   specdec chat -m T -md D               a conversation in the model's chat template
//   specdec bench -m T -md D              baseline vs speculative on many prompts, one table
//   specdec info FILE                     what a model file holds, and whether generate can run it
//   specdec logits -m M --tokens ..       raw logits of one forward, for conformance checks
//   specdec convert IN OUT --type q8_0    rewrite a GGUF's weights as Q8_0 or F16
//   specdec serve -m T -md D              an OpenAI-compatible HTTP server (docs/serve.md)
//
// docs/cli.md documents every option. Errors are one line on stderr, "specdec: error: ...",
// with exit status 2 for bad command lines (CLI11's message, or args.hpp's for unknown and
// llama.cpp-only flags), 1 for everything else, and 128 + the signal after Ctrl-C (130), SIGTERM
// (143) or SIGHUP (129), each of which stops the command cleanly first (common.hpp).

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "args.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "specdec/common.hpp"
#include "specdec/version.hpp"

namespace {

int fail(int status, const std::string& message) {
  std::fflush(stdout);
  fmt::print(stderr, "specdec: error: {}\n", message);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"specdec " SPECDEC_VERSION_STRING
               ": exact speculative decoding for Llama-family models",
               "specdec"};
  app.set_version_flag("--version", SPECDEC_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // --help after a subcommand's options still works
  // A flag given twice takes its last value, as in llama.cpp (a wrapper script's defaults can be
  // overridden by appending); list options (--stop, bench's -k) collect every value instead.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  specdec::cli::add_demo(app);
  specdec::cli::add_generate(app);
  specdec::cli::add_chat(app);
  specdec::cli::add_bench(app);
  specdec::cli::add_info(app);
  specdec::cli::add_logits(app);
  specdec::cli::add_convert(app);
  specdec::cli::add_tokenize(app);
  specdec::cli::add_serve(app);

  specdec::cli::set_command_line(argc, argv);
  try {
    std::vector<std::string> args =
        specdec::cli::normalize_args(app, std::vector<std::string>(argv + 1, argv + argc));
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);                         // the chosen subcommand runs inside, from its callback
    // Output still buffered is written here: a full disk must not exit 0.
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout))
      return fail(1, std::string("cannot write to stdout: ") +
                         (errno != 0 ? std::strerror(errno) : "write error"));
    return specdec::cli::interrupted() ? specdec::cli::interrupted_exit_status() : 0;
  } catch (const specdec::cli::Terminated&) {
    return specdec::cli::interrupted_exit_status();
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return fail(2, std::string(e.what()) + " (see --help)");
  } catch (const specdec::cli::UsageError& e) {
    return fail(2, e.what());
  } catch (const std::system_error& e) {  // fmt::print to a stdout that cannot be written
    if (std::ferror(stdout)) return fail(1, "cannot write to stdout: " + e.code().message());
    return fail(1, e.what());
  } catch (const std::exception& e) {  // specdec::Error and anything unexpected
    return fail(1, e.what());
  }
}
