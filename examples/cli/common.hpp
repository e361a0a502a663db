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

#include "options.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/loader.hpp"

namespace specdec::cli {

// ------------------------------------------------------------------------ terminal

/// True when stdout and stderr are both terminals: then progress lines (on stderr) are shown.
/// Piped or redirected output stays plain.
bool interactive();

/// --color: auto (on a terminal unless NO_COLOR is set, https://no-color.org), on, off.
enum class ColourMode { automatic, on, off };
void set_colour_mode(ColourMode mode);
/// Colours in the streamed text.
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

/// "specdec: warning: ..." on stderr.
void warn(std::string_view message);

// ------------------------------------------------------------------------ output

/// Writes to stdout and flushes; a failed write (a full disk, a closed pipe's EPIPE) throws
/// specdec::Error naming stdout and the reason, so that the command exits nonzero.
void write_stdout(std::string_view text);
void flush_stdout();

/// A file named on the command line that a command writes when it ends (--trace, --json-file,
/// logits --out). It is opened, and created if need be, when the command starts: an unwritable
/// path is refused (UsageError, exit status 2) before any model is loaded. write() then replaces
/// its content; a failed write (a full disk) throws specdec::Error. A file the command created is
/// removed again if the command fails before writing it (or is ended by a second Ctrl-C).
class OutputFile {
 public:
  OutputFile(std::string flag, std::string path);
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile();
  void write(std::string_view bytes);
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string flag_;
  std::string path_;
  int fd_ = -1;
  bool created_ = false;
  bool written_ = false;
  void* slot_ = nullptr;  ///< where the second Ctrl-C finds the path to remove (common.cpp)
};

// ------------------------------------------------------------------------ interrupts

/// Exit status after Ctrl-C: 128 + SIGINT, as a shell reports a process the signal ended.
inline constexpr int kInterruptedExit = 130;

/// While alive, the first SIGINT only sets interrupted() (generate polls it before each round
/// through Callbacks::should_stop, then finishes normally: stop reason "cancelled"); a second
/// SIGINT ends the process at once with kInterruptedExit.
class InterruptHandler {
 public:
  InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;
  ~InterruptHandler();
};
bool interrupted();

// ------------------------------------------------------------------------ models

/// A model file opened for the CPU backend: the file's config, weights and tokenizer, and (once
/// started) a Transformer with its own KV cache over those weights.
struct Model {
  LoadedModel file;
  std::string role;  ///< "target", "draft", "model": names it in messages
  std::unique_ptr<cpu::Transformer> lm;

  [[nodiscard]] const Tokenizer& tokenizer() const;  ///< throws when the file carries none
};

/// Memory-maps `path` (a .gguf file or a Hugging Face folder); no KV cache yet.
Model open_model(const std::string& path, std::string_view role);

/// The backend options of a model from the flags: threads (-t, or -td for the draft), KV cache
/// type, and the context: -c N (or -cd for the draft), 0 = the model's, by default the model's
/// capped at kDefaultContext. Warns when -c exceeds the context the model was trained for.
cpu::Options model_options(const Model& model, const ModelFlags& flags);

/// Gives each model its Transformer with its options. First checks that their KV caches fit in
/// memory together (throws naming the sizes, the limit and -c), and warns when a thread count
/// exceeds the CPUs this process may use.
void start_models(std::span<Model* const> models, std::span<const cpu::Options> options);

/// open_model + model_options + start_models for a command with one model.
Model load_model_for_cpu(const std::string& path, std::string_view role, const ModelFlags& flags);

/// Refuses a draft whose tokenizer differs from the target's (vocabulary size, or any piece):
/// speculative decoding compares the two models' probabilities token id by token id.
void check_same_vocabulary(const Model& target, const Model& draft);

// ------------------------------------------------------------------------ decoding

/// Which decoder a run uses.
struct DecodeSetup {
  /// none: target-only (the baseline); lookup_model: n-gram lookup, the draft model when it
  /// finds nothing (LookupThenModelDrafter)
  enum class Drafter { none, model, ngram, lookup_model };
  Drafter drafter = Drafter::none;
  std::size_t k = 4;          ///< draft length (fixed), or the largest with adaptive
  bool adaptive = false;      ///< choose k per round from the running acceptance
  std::size_t max_k = 8;      ///< adaptive: the largest k (default: AdaptiveDraftLength's)
  std::size_t ngram = 3;      ///< n-gram drafter: longest suffix looked up
  std::size_t ngram_min = 1;  ///< n-gram drafter: shortest suffix looked up
  std::size_t draft_head =
      0;  ///< the draft's head restricted to the first N ids (0: whole); a label
  /// Adaptive k: C(k) for k = 0 .. max_k, measured (cost_model.hpp); empty: the guessed cost.
  std::vector<double> round_cost{};
  std::size_t draft_min = 0;  ///< proposals shorter than this are not verified (--draft-min)

  [[nodiscard]] std::string label() const;  ///< "baseline", "draft model k=4", "n-gram adaptive k"
  /// The decoder's options for this setup (k or adaptive k, --draft-min).
  [[nodiscard]] SpeculativeOptions speculative_options() const;
  [[nodiscard]] NGramDrafter::Options ngram_options() const;
};

/// One generation with the setup's decoder: `draft` is used by Drafter::model and lookup_model.
/// With config.record_rounds, every round's record (p(x) and q(x) of its drafted tokens included)
/// is kept in the result.
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
/// The whole of stdin (for -f -).
std::string read_stdin();

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

/// A JSON value as text, indented, with a final newline (UTF-8 errors replaced, not thrown).
std::string json_text(const nlohmann::json& j);
/// Writes json_text(j) to stdout.
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
