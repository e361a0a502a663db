#pragma once
// The command line as a llama.cpp user types it, checked before CLI11 parses it.
//
// CLI11 declares one-letter short options ("-m") and "--long" ones. llama.cpp also has
// single-dash names of several letters ("-md", "-ngl", "-ctk"), which CLI11 would read as a
// short option with its value glued on: "-ngl 0" as "-n gl", "-md d.gguf" as "-m d" plus a stray
// argument. normalize_args() runs first and, for the chosen subcommand:
//  - rewrites llama.cpp's single-dash names that specdec has to their "--" names (-md ->
//    --model-draft, -ctk -> --cache-type-k, ...);
//  - refuses the llama.cpp flags specdec does not have, each with what it is and why (-ngl, -fa,
//    -b, --mlock, --repeat-penalty, ...): never a misparse;
//  - refuses any other unknown flag by name, suggesting the nearest known one (--tmp: did you
//    mean --temp?).
// Values are skipped as CLI11 will consume them, so "-p -ngl" is a prompt, not a flag.

#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace specdec::cli {

/// A bad command line found outside CLI11 (main.cpp: exit status 2, like CLI11's errors).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The arguments (argv[1..]) ready for app.parse(); throws UsageError as described above.
std::vector<std::string> normalize_args(CLI::App& app, std::vector<std::string> args);

/// Edit distance (insertions, deletions, substitutions) between two strings.
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace specdec::cli
