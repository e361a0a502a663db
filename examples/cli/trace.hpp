#pragma once
// `specdec generate --trace out.html`: a self-contained HTML page (no network resources: the
// styles and the script are inline) showing every round of a generation — the drafted tokens
// with the target's p(x) and the draft's q(x) of each, which were accepted, the rejected one, the
// correction or bonus token the target added — and per round the acceptance and the draft,
// verify and sampling times, with the generated text coloured by where each token came from.
//
// The page embeds the rounds as JSON (<script type="application/json" id="trace-data">) and a
// small inline script renders them, so the data stays readable by tools too.

#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include <vector>

#include "common.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec::cli {

struct TraceInput {
  std::string title;                         ///< e.g. "specdec generate: draft model k=4"
  nlohmann::json settings;                   ///< flat object of what was run (shown as key: value)
  std::span<const token_t> prompt;           ///< prompt ids (BOS included)
  const Tokenizer* tokenizer = nullptr;      ///< for the tokens' text (ids only when null)
  const GenerationResult* result = nullptr;  ///< with rounds recorded (record_rounds)
};

/// The page's JSON data: settings, stats, the prompt's text and one object per round.
nlohmann::json trace_data(const TraceInput& input);
/// The whole HTML page.
std::string trace_html(const TraceInput& input);

}  // namespace specdec::cli
