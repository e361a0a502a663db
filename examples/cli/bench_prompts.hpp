#pragma once
// The prompts `specdec bench -m TARGET` runs when it is given neither --prompts nor
// --prompt-file: plain-text openings (no chat template, so that base and instruct models alike
// continue them), half code and half prose, as the demo pair's eval prompts are split. They are
// general on purpose: the demo pair's own prompts (Bible verses and its training code) would
// measure the acceptance of any other pair on text it has no reason to predict well.

#include <array>
#include <string_view>

namespace specdec::cli {

struct BuiltinPrompt {
  std::string_view domain;
  std::string_view text;
};

inline constexpr std::array<BuiltinPrompt, 8> kBuiltinBenchPrompts = {{
    {"code",
     "def binary_search(items, target):\n    \"\"\"Return the index of target in the sorted list "
     "items, or -1 if it is absent.\"\"\"\n"},
    {"code",
     "#include <string>\n#include <vector>\n\n// Splits s at every occurrence of sep and returns "
     "the pieces.\nstd::vector<std::string> split(const std::string& s, char sep) {\n"},
    {"code",
     "// A small HTTP handler in Go that returns the current time as JSON.\npackage main\n\nimport "
     "(\n\t\"encoding/json\"\n\t\"net/http\"\n\t\"time\"\n)\n\n"},
    {"code",
     "-- Every customer with the total of their orders in 2023, largest first.\nSELECT c.name,"},
    {"prose",
     "The history of the printing press begins long before Gutenberg. In the eleventh century,"},
    {"prose", "Here is a simple recipe for a loaf of bread that anyone can bake at home.\n\n1."},
    {"prose",
     "Q: Why is the sky blue during the day and red at sunset?\nA: Sunlight is made of many "
     "colours, and"},
    {"prose",
     "Dear team,\n\nThank you all for your work on the release this week. Before the holidays I "
     "would like to"},
}};

}  // namespace specdec::cli
