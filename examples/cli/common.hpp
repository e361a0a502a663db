#pragma once
// What the subcommands of the specdec CLI share: the backend, loading models, running one decoder
// configuration, reading prompts, printing (progress on a terminal, coloured streaming,
// statistics as JSON) and finding the bundled demo models.

#include <cstddef>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "options.hpp"
#include "specdec/cpu/transformer.hpp"
#if SPECDEC_CLI_CUDA
#include "specdec/cuda/transformer.hpp"
#endif
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/setup.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/sampling/logprobs.hpp"
#include "specdec/sampling/penalties.hpp"

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

// ------------------------------------------------------------------------ logging

/// What stderr shows, by llama.cpp's verbosity levels (-lv N shows the levels <= N; -v all;
/// --log-disable errors only). Errors ("specdec: error: ...") are always shown: they are the
/// command's answer. Default: information (progress, statistics, notes).
enum class LogLevel { error = 1, warning = 2, info = 3, debug = 4 };
void set_log_threshold(int threshold);
inline void set_log_threshold(LogLevel level) { set_log_threshold(static_cast<int>(level)); }
/// Whether messages of `level` are shown.
bool logs(LogLevel level);
/// --log-file FILE: stderr (every message, errors included) goes to FILE from now on, appended.
void redirect_stderr(const std::string& path);

/// One status line on stderr, rewritten in place ("\r"), shown only when interactive().
class Progress {
 public:
  Progress() : enabled_(interactive() && logs(LogLevel::info)) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }
  void update(std::string_view message);
  void clear();  ///< erases the line (before normal output is printed)

 private:
  bool enabled_;
  bool shown_ = false;
};

/// "specdec: warning: ..." on stderr (LogLevel::warning).
void warn(std::string_view message);
/// "specdec: note: ..." on stderr (LogLevel::info): what was done with a flag, and such.
void note(std::string_view message);
/// "specdec: debug: ..." on stderr (LogLevel::debug: -v).
void debug(std::string_view message);

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

/// While alive, the first stop signal only sets interrupted() (generate polls it before each
/// round through Callbacks::should_stop, then finishes normally: stop reason "cancelled", the
/// statistics printed, --trace and --json-file written) and a second one ends the process at
/// once, removing the output files it created and has not written.
///  - SIGINT (Ctrl-C) prints `note` on stderr; chat forgets it after the answer it stopped.
///  - SIGTERM (kill, timeout, systemd, docker stop) and SIGHUP (the terminal closed) are never
///    forgotten: they also end a chat, whose conversation file is written. After SIGHUP the
///    terminal's descriptors point to /dev/null, so that writing to it cannot fail.
/// The process then exits with 128 + the first signal's number (interrupted_exit_status()).
class InterruptHandler {
 public:
  explicit InterruptHandler(
      const char* note =
          "\nspecdec: interrupted: stopping after this round (Ctrl-C again to quit at once)\n");
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;
  ~InterruptHandler();
};
/// Thrown where a SIGTERM or SIGHUP ends a command that has nothing to finish yet (waiting for
/// its prompt on stdin); main() exits with interrupted_exit_status().
struct Terminated : std::exception {
  [[nodiscard]] const char* what() const noexcept override { return "terminated by a signal"; }
};
/// A stop signal arrived (a SIGINT since the last reset_interrupts(), or any SIGTERM / SIGHUP).
bool interrupted();
/// A SIGTERM or SIGHUP arrived: the command is to end, not just its current answer.
bool terminating();
/// 128 + the first stop signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 130 when none arrived.
int interrupted_exit_status();
/// Forgets the SIGINTs received so far and sets the note the next one prints (chat: each answer
/// can be stopped on its own; at the prompt a SIGINT ends the chat). `note` must be a literal.
void reset_interrupts(const char* note);
/// A descriptor that becomes readable when a stop signal arrives (the handler writes a byte to
/// a pipe): chat and -f - poll it beside stdin, so that a signal while waiting for input is seen
/// at once.
int interrupt_fd();

// ------------------------------------------------------------------------ backends

/// The backends a command can run its models on (--backend).
enum class Backend { cpu, cuda };

/// --backend cpu|cuda. The CUDA backend is in this binary when it was built with nvcc
/// (SPECDEC_CLI_CUDA: linked to specdec::cuda; the tests' specdec-emu links the emulated
/// specdec::cuda_emu instead, which runs the same code on the CPU).
struct BackendFlag {
  std::string text;  ///< "cpu", "cuda", or "" for the default
  /// The backend: the flag, else $SPECDEC_BACKEND, else cuda when this binary has the CUDA
  /// backend and a device is present, else cpu. Throws specdec::Error when cuda is asked for and
  /// this binary was built without CUDA, or no CUDA device is present (cudaGetDeviceCount's
  /// answer in the message).
  [[nodiscard]] Backend resolve() const;
};
void add_backend_flag(CLI::App& cmd, BackendFlag& flag);
const char* backend_name(Backend backend);

/// Calls f(std::type_identity<LM>{}) with LM the model type of `backend` (cpu::Transformer or
/// cuda::Transformer): a command's body is a template over the model type, instantiated for
/// each backend of this binary.
template <class F>
decltype(auto) on_backend(Backend backend, F&& f) {
#if SPECDEC_CLI_CUDA
  if (backend == Backend::cuda) return f(std::type_identity<cuda::Transformer>{});
#else
  if (backend == Backend::cuda) throw Error("this specdec was built without the CUDA backend");
#endif
  return f(std::type_identity<cpu::Transformer>{});
}

// ------------------------------------------------------------------------ models

/// A model file opened for a backend: the file's config, weights and tokenizer, and (once
/// started) the backend's model `LM` (cpu::Transformer or cuda::Transformer) with its own KV cache
/// over those weights.
template <class LM>
struct Model {
  LoadedModel file;
  std::string role;  ///< "target", "draft", "model": names it in messages
  std::unique_ptr<LM> lm;

  [[nodiscard]] const Tokenizer& tokenizer() const {  ///< throws when the file carries none
    if (!file.tokenizer)
      throw Error(file.source +
                  ": the model file carries no tokenizer, so text prompts cannot be encoded");
    return *file.tokenizer;
  }
};

/// Memory-maps `path` (a .gguf file or a Hugging Face folder); no KV cache yet.
LoadedModel open_model_file(const std::string& path, std::string_view role);
template <class LM>
Model<LM> open_model(const std::string& path, std::string_view role) {
  return Model<LM>{open_model_file(path, role), std::string(role), nullptr};
}

/// The KV cache positions of a model from the flags: -c N (or -cd for the draft), 0 = the
/// model's, by default the model's capped at kDefaultContext. Warns when it exceeds the context
/// the model was trained for.
std::size_t context_positions(const LoadedModel& file, std::string_view role,
                              const ModelFlags& flags);
/// The CPU backend's options of a model from the flags: threads (-t, or -td for the draft), KV
/// cache type, context_positions().
cpu::Options model_options(const LoadedModel& file, std::string_view role, const ModelFlags& flags);
#if SPECDEC_CLI_CUDA
/// The CUDA backend's options of a model from the flags: the context and the KV cache type.
cuda::Options cuda_model_options(const LoadedModel& file, std::string_view role,
                                 const ModelFlags& flags);
#endif
/// The options of a model on backend LM from the flags (model_options or cuda_model_options).
inline cpu::Options backend_options(std::type_identity<cpu::Transformer>, const LoadedModel& file,
                                    std::string_view role, const ModelFlags& flags) {
  return model_options(file, role, flags);
}
#if SPECDEC_CLI_CUDA
inline cuda::Options backend_options(std::type_identity<cuda::Transformer>, const LoadedModel& file,
                                     std::string_view role, const ModelFlags& flags) {
  return cuda_model_options(file, role, flags);
}
#endif

/// Gives each model its backend model, with its options from the flags. On the CPU first checks
/// that the KV caches fit in memory together (throws naming the sizes, the limit and -c) and
/// warns when a thread count exceeds the CPUs this process may use; the CUDA backend checks the
/// device's memory itself.
template <class LM>
void start_models(std::span<Model<LM>* const> models, const ModelFlags& flags);

/// open_model + start_models for a command with one model.
template <class LM>
Model<LM> load_model_for(const std::string& path, std::string_view role, const ModelFlags& flags) {
  Model<LM> m = open_model<LM>(path, role);
  Model<LM>* const models[] = {&m};
  start_models<LM>(models, flags);
  return m;
}

/// Checks the penalties' token ids (-l/--logit-bias) against the target's vocabulary, before the
/// models start; throws Error naming the flag.
void check_penalties(const sampling::Penalties& penalties, const LoadedModel& target);

/// The threads a model computes with (0 for a GPU model), for reports.
inline std::size_t model_threads(const cpu::Transformer& lm) { return lm.threads(); }
template <class LM>
std::size_t model_threads(const LM&) {
  return 0;
}

// ------------------------------------------------------------------------ decoding

// DecodeSetup: the library's (specdec/decoder/setup.hpp).

/// The setup of generate, chat and serve from the flags they share (-md, --ngram, --baseline,
/// -k/--draft-max, --adaptive, --draft-min); `command` names the command in errors. Without a
/// drafter the run is target-only (plain decoding, as llama-completion and llama-server do).
inline DecodeSetup decode_setup_of(const DecodeFlags& o, std::string_view command) {
  DecodeSetup setup;
  setup.k = o.k;
  setup.adaptive = o.adaptive;
  if (o.adaptive && o.k_given) setup.max_k = o.k;
  setup.draft_min = o.draft_min;
  if (o.draft_min > o.k && !o.adaptive)
    throw UsageError(
        fmt::format("{}: --draft-min {} is more than --draft-max {}: no proposal would be verified",
                    command, o.draft_min, o.k));
  if (o.tree_nodes_given && !o.baseline && !o.suffix && !o.draft)
    throw UsageError(fmt::format(
        "{}: --tree-nodes applies to --suffix and to a draft model (-md), not to --ngram",
        command));
  if ((o.tree_topk || o.tree_depth || o.draft_p_min || o.draft_p_split) && !o.baseline &&
      !(o.draft && (o.tree_nodes_given || o.suffix)))
    throw UsageError(fmt::format(
        "{}: --tree-topk, --tree-depth, --draft-p-min and --draft-p-split shape draft model "
        "trees: give -md MODEL and --tree-nodes N (or --suffix)",
        command));
  if (o.suffix && o.draft && !o.baseline && o.tree_nodes == 0)
    throw UsageError(fmt::format(
        "{}: --suffix with a draft model (-md) verifies trees: --tree-nodes must be at least 1",
        command));
  if (o.baseline || (!o.draft && !o.ngram && !o.suffix)) {
    setup.drafter = DecodeSetup::Drafter::none;
  } else if (o.draft && (o.suffix || (o.tree_nodes_given && o.tree_nodes > 0))) {
    // Draft model trees, behind the suffix drafter with --suffix.
    setup.drafter =
        o.suffix ? DecodeSetup::Drafter::suffix_model : DecodeSetup::Drafter::model_tree;
    setup.tree_nodes = o.tree_nodes;
    setup.tree_nodes_given = o.tree_nodes_given;
    setup.suffix_shape.min_score = o.suffix_min_prob;
    if (o.tree_topk) setup.model_tree_shape.branch = setup.model_tree_shape.expand = *o.tree_topk;
    if (o.tree_depth) setup.model_tree_shape.max_depth = *o.tree_depth;
    if (o.draft_p_min) setup.model_tree_shape.min_score = *o.draft_p_min;
    if (o.draft_p_split) setup.model_tree_shape.split = *o.draft_p_split;
  } else if (o.suffix) {
    setup.drafter = DecodeSetup::Drafter::suffix;
    setup.tree_nodes = o.tree_nodes;
    setup.tree_nodes_given = o.tree_nodes_given;
    setup.suffix_shape.min_score = o.suffix_min_prob;
  } else if (o.draft) {
    setup.drafter = DecodeSetup::Drafter::model;
  } else {
    setup.drafter = DecodeSetup::Drafter::ngram;
    setup.ngram = *o.ngram;
  }
  return setup;
}

/// The decoder of one setup over the models, kept across the turns of a conversation:
/// generate() starts a sequence (both caches reset), continue_with() appends the next turn's
/// tokens to it and generates (only they are prefilled: the decoders' continue_with). `draft` is
/// used by Drafter::model and Drafter::lookup_model. The models must outlive the decoder.
template <class LM>
class Decoder {
 public:
  Decoder(Model<LM>& target, Model<LM>* draft, const DecodeSetup& setup);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  GenerationResult generate(std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {});
  GenerationResult continue_with(std::span<const token_t> tokens, const GenerationConfig& config,
                                 const Callbacks& callbacks = {});
  /// The conversation so far: prompts and generated tokens (EOS excluded).
  [[nodiscard]] const std::vector<token_t>& sequence() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One generation with the setup's decoder. With config.record_rounds, every round's record
/// (p(x) and q(x) of its drafted tokens included, on the CPU backend) is kept in the result.
template <class LM>
GenerationResult run_decode(Model<LM>& target, Model<LM>* draft, const DecodeSetup& setup,
                            std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks = {}) {
  Decoder<LM> decoder(target, draft, setup);
  return decoder.generate(prompt, config, callbacks);
}

/// Tokenizes a prompt with the target's tokenizer (BOS as the model expects) and checks that it
/// fits the target's context (`context`). `source` names the prompt in the error ("--prompt").
std::vector<token_t> encode_prompt(const Tokenizer& tokenizer, std::size_t context,
                                   std::string_view text, std::string_view source);
/// Checks that prompt tokens leave room to generate in a context of `context` positions.
void check_prompt_fits(std::size_t tokens, std::size_t context, std::string_view source);
template <class LM>
std::vector<token_t> encode_prompt(const Model<LM>& target, std::string_view text,
                                   std::string_view source) {
  return encode_prompt(target.tokenizer(), target.lm->context_length(), text, source);
}

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

/// Log-probabilities as generate --json and the trace write them, one object per token:
/// {"id", "token" (its text), "logprob", "top_logprobs": [{"id", "token", "logprob"}, ...]}.
nlohmann::json logprobs_json(const Tokenizer* tokenizer,
                             std::span<const sampling::TokenLogprob> logprobs);

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
