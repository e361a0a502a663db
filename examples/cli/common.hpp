#pragma once
// What the subcommands of the specdec CLI share: loading models, running one decoder
// configuration, reading prompts, printing (progress on a terminal, coloured streaming,
// statistics as JSON) and finding the bundled demo models.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/loader.hpp"

namespace specdec::cli {

// ------------------------------------------------------------------------ terminal

/// True when stdout and stderr are both terminals: then progress lines (on stderr) and colours
/// are shown. Piped or redirected output stays plain.
bool interactive();
/// Colours in the streamed text: on a terminal unless NO_COLOR is set (https://no-color.org).
bool use_colour();

/// One status line on stderr, rewritten in place ("\r"), shown only when interactive().
class Progress {
 public:
  Progress() : enabled_(interactive()) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }
  void update(std::string_view message);
  void clear();  ///< erases the line (before normal output is printed)

 private:
  bool enabled_;
  bool shown_ = false;
};

// ------------------------------------------------------------------------ models

/// A model file loaded for the CPU backend: the file's config, weights and tokenizer, and a
/// Transformer (with its own KV cache) over those weights.
struct Model {
  LoadedModel file;
  std::unique_ptr<cpu::Transformer> lm;

  [[nodiscard]] const Tokenizer& tokenizer() const;  ///< throws when the file carries none
};

/// Loads `path` (a .gguf file or a Hugging Face folder); `role` ("target", "draft", "model")
/// names it in progress and error messages. threads = 0: the backend's default.
Model load_model_for_cpu(const std::string& path, std::string_view role, std::size_t threads);

/// Refuses a draft whose tokenizer differs from the target's (vocabulary size, or any piece):
/// speculative decoding compares the two models' probabilities token id by token id.
void check_same_vocabulary(const Model& target, const Model& draft);

// ------------------------------------------------------------------------ decoding

/// Which decoder a run uses.
struct DecodeSetup {
  enum class Drafter { none, model, ngram };  ///< none: target-only (the baseline)
  Drafter drafter = Drafter::none;
  std::size_t k = 4;      ///< draft length (fixed)
  bool adaptive = false;  ///< choose k per round from the running acceptance
  std::size_t ngram = 3;  ///< n-gram drafter: longest suffix looked up

  [[nodiscard]] std::string label() const;  ///< "baseline", "draft model k=4", "n-gram adaptive k"
};

/// One generation with the setup's decoder: `draft` is used only by Drafter::model.
GenerationResult run_decode(Model& target, Model* draft, const DecodeSetup& setup,
                            std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {});

/// Tokenizes a prompt with the target's tokenizer (BOS as the model expects) and checks that it
/// fits the target's context. `source` names the prompt in the error ("--prompt", a file).
std::vector<token_t> encode_prompt(const Model& target, std::string_view text,
                                   std::string_view source);

/// Streams generated text to stdout as it is emitted. With colours, tokens the target accepted
/// from the draft are green and the tokens the target chose itself (the correction or the bonus
/// token ending each round) are plain: the rhythm of speculation made visible.
class StreamPrinter {
 public:
  explicit StreamPrinter(bool speculative);
  [[nodiscard]] Callbacks callbacks();
  void finish();  ///< prints what is still buffered and ends the line

 private:
  void print_round(std::size_t accepted);
  bool speculative_;
  bool colour_;
  std::vector<std::string> pending_;  ///< text of the current round's tokens, one per token
  std::string tail_;                  ///< text that arrived after the last round (flush)
};

// ------------------------------------------------------------------------ prompts, output

std::string read_text_file(const std::string& path);

/// One line of an eval-prompts.jsonl file: {"domain": "code"|"prose", "text": ...}.
struct EvalPrompt {
  std::string domain;
  std::string text;
};
std::vector<EvalPrompt> read_eval_prompts(const std::string& path);

/// A token's text for display: its bytes when they are valid UTF-8, else <0xNN> escapes; special
/// tokens (no bytes) as their piece ("<s>").
std::string display_token(const Tokenizer& tokenizer, token_t id);

/// Every statistic by its snake_case name, the accepted-length histogram included.
nlohmann::json stats_json(const GenerationStats& stats);

/// One line for stderr: "128 tokens in 0.52 s (246.1 tok/s), acceptance 0.71, ...".
std::string stats_line(const GenerationResult& result, bool speculative);

/// A float flag as the user typed it (0.8, not 0.800000011920929): the shortest decimal that
/// reads back as the same float.
double as_typed(float value);

/// Writes a JSON value to stdout (UTF-8 errors replaced rather than thrown).
void print_json(const nlohmann::json& j);

/// The command line as typed (main() records it), for the JSON outputs.
void set_command_line(int argc, char** argv);
const std::string& command_line();

// ------------------------------------------------------------------------ demo models

/// The folder holding the bundled demo models (target-q8_0.gguf, draft-q8_0.gguf). Looked up in
/// order: `override_dir` (--models-dir), $SPECDEC_MODELS_DIR, next to the executable
/// (<bin>/models, <bin>/../models, <bin>/../share/specdec/models: an install or a copied build),
/// and the source tree the executable was built from. Throws naming every place it looked.
std::filesystem::path find_models_dir(const std::optional<std::string>& override_dir);

}  // namespace specdec::cli
