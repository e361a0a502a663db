#pragma once
// What `specdec chat` and `specdec generate --chat` share: the chat flags (--system,
// --chat-template) and the target model's chat format (its template, the end-of-turn ids and stop
// strings that end an answer besides the EOS).

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/decoder/generation.hpp"
#include "specdec/model/chat_template.hpp"
#include "specdec/model/loader.hpp"

namespace specdec::cli {

struct ChatFlags {
  std::optional<std::string> system;         ///< --system: the system message
  std::optional<std::string> chat_template;  ///< --chat-template NAME: instead of the model's
};
void add_chat_flags(CLI::App& cmd, ChatFlags& flags);

/// The target's chat format: its template (--chat-template, else detected from the model's own;
/// throws naming --chat-template when there is none or it is not recognised), and what ends an
/// answer: the template's end-of-turn marks that the tokenizer has as single special tokens
/// (GenerationConfig::stop_tokens, beside the EOS), and as stop strings those it does not.
struct ChatFormat {
  ChatTemplate tmpl;
  std::vector<token_t> end_tokens;
  std::vector<std::string> stop_strings;

  /// Makes `config` end answers as this format's turns end (set config.stop_at_eos first: without
  /// it the end-of-turn tokens are not added either).
  void apply(GenerationConfig& config) const;
};
ChatFormat chat_format(const LoadedModel& target, const ChatFlags& flags);

/// The first turn's messages: the --system message, if any, then the user's.
std::vector<ChatMessage> first_messages(const ChatFlags& flags, std::string user);

}  // namespace specdec::cli
