#pragma once
// Chat templates: a conversation (system / user / assistant messages) as the prompt text an
// instruction-tuned model was trained on.
//
// Models ship their template as Jinja source (GGUF `tokenizer.chat_template`, Hugging Face
// tokenizer_config.json `chat_template`). specdec has no Jinja interpreter: like llama.cpp's
// built-in templates (llm_chat_detect_template), it recognises the family a template belongs to
// by characteristic substrings and renders that family in C++. Unlike llama.cpp's built-ins, the
// rendering reproduces the official Jinja template byte for byte
// (tests/model/test_chat_template.cpp compares it with what jinja2 renders from the published
// templates, tools/make_chat_fixtures.py):
//
//   family      official template reproduced                          end of an assistant turn
//   chatml      OpenHermes-2.5 / Qwen2 / Qwen2.5 (with the default system  <|im_end|>
//               message a Qwen template carries)
//   llama3      Meta-Llama-3-Instruct                                 <|eot_id|>
//   llama3.1    Llama-3.1 / 3.2 / 3.3-Instruct (the system block with its  <|eot_id|>
//               "Cutting Knowledge Date" lines; no tools)
//   llama2      Llama-2-chat (<<SYS>>, BOS before every [INST], strip)   eos (</s>)
//   mistral     Mistral-7B-Instruct v0.1 / v0.2, Mixtral-8x7B-Instruct   eos (</s>)
//               ([INST] ... [/INST], no system role)
//   gemma       Gemma, Gemma 2, Gemma 3 (a system message is put before  <end_of_turn>
//               the first user message, as Gemma 3's template does)
//   phi3        Phi-3 / Phi-3.5-mini (<|user|> ... <|end|>)            <|end|>
//   zephyr      Zephyr-7B-beta, TinyLlama-Chat (<|user|> ... eos)        eos (</s>)
//
// bos_token and eos_token in those templates are the tokenizer's BOS and EOS texts:
// for_model() takes them from the model's tokenizer, detect() and named() use the family's own.
// Turning the text into tokens is tokenize_chat() below (special tokens written in the text
// become their ids, and a BOS is never doubled).

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec {

/// One message of a conversation. role: "system", "user" or "assistant".
struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  /// The family a template text belongs to, detected as llama.cpp's llm_chat_detect_template
  /// does (by characteristic substrings); throws specdec::Error naming --chat-template when
  /// unknown. A text that is a family's name ("chatml") is that family, as in llama.cpp.
  static ChatTemplate detect(std::string_view template_text);
  /// A family by name: chatml, llama3, llama3.1, llama2, mistral, gemma, phi3, zephyr; throws
  /// listing the known names.
  static ChatTemplate named(std::string_view name);
  /// The model's template (override name if given, else detected from the file's text; a model
  /// without a template: error naming --chat-template). bos_token / eos_token are the texts of
  /// the model tokenizer's BOS and EOS when it has them.
  static ChatTemplate for_model(const LoadedModel& model,
                                const std::optional<std::string>& override_name);

  /// The names named() knows, in the order of the table above.
  static std::vector<std::string_view> names();

  [[nodiscard]] std::string_view name() const;
  /// The prompt text of a conversation; with add_generation_prompt the assistant header that
  /// starts the next answer is appended. Throws specdec::Error for a conversation the official
  /// template refuses (an unknown role; a system message not first; roles that do not alternate
  /// where the template requires it; a system message for mistral).
  [[nodiscard]] std::string render(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const;
  /// Text that ends an assistant turn in this format (e.g. "<|im_end|>", "<|eot_id|>", "</s>"),
  /// used as stop strings / end-of-turn tokens when the tokenizer's EOS differs.
  [[nodiscard]] std::vector<std::string> end_of_turn() const;

  /// The texts the template writes for bos_token and eos_token.
  [[nodiscard]] const std::string& bos_token() const { return bos_; }
  [[nodiscard]] const std::string& eos_token() const { return eos_; }
  /// This family with other bos_token / eos_token texts (a tokenizer's).
  [[nodiscard]] ChatTemplate with_special_tokens(std::string bos, std::string eos) const;

  /// The text that continues a conversation once an assistant answer ended: `messages` are the
  /// whole conversation (the answer, then the next messages, e.g. the user's next turn), and the
  /// result is render(messages, true) from the end of that last assistant answer on — starting
  /// with the end-of-turn marker that closes it (whitespace the template puts between the
  /// answer and the marker, Llama 2's " </s>", is left out: the model ended its answer at the
  /// marker). This is what a chat appends to a KV cache holding the conversation up to the
  /// answer (docs/cli.md, "specdec chat"). Throws when the conversation has no assistant message
  /// followed by another message.
  [[nodiscard]] std::string continuation(std::span<const ChatMessage> messages) const;

  enum class Family { chatml, llama3, llama31, llama2, mistral, gemma, phi3, zephyr };
  [[nodiscard]] Family family() const { return family_; }

 private:
  explicit ChatTemplate(Family family);
  /// render() that also records, per message, the offset in the text where its content ends
  /// (std::string::npos for a message the template does not write on its own).
  std::string render_marked(std::span<const ChatMessage> messages, bool add_generation_prompt,
                            std::vector<std::size_t>* content_ends) const;

  Family family_;
  std::string bos_;
  std::string eos_;
  std::string default_system_;  ///< chatml: the system message a Qwen template adds when none
  std::string date_;            ///< llama3.1: the "Today Date" of the system block
  bool system_role_ = true;     ///< gemma: false for Gemma 1 / 2 templates, which refuse one
};

/// The token ids of a rendered conversation, as llama.cpp tokenizes a chat prompt
/// (common_tokenize with parse_special): special tokens written in the text ("<|im_start|>",
/// "<s>", "</s>") become their ids (Tokenizer::encode_special). With `at_start` the text begins a
/// sequence: BOS is added when the tokenizer adds one, and then a BOS text the template wrote at
/// the start is dropped first (llama.cpp's common_chat_templates_apply does the same), so the
/// sequence holds exactly one BOS either way. Without `at_start` (a continuation appended to a
/// sequence) no BOS is added.
std::vector<token_t> tokenize_chat(const Tokenizer& tokenizer, std::string_view text,
                                   bool at_start);

/// The ids among end_of_turn() that the tokenizer has as single special tokens (encode_special
/// gives exactly one id and it is a control token's): what ends an answer besides the EOS.
std::vector<token_t> end_of_turn_tokens(const ChatTemplate& chat_template,
                                        const Tokenizer& tokenizer);

}  // namespace specdec
