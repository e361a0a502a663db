#include "common.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "args.hpp"
#include "demo_models.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/decoder/speculative.hpp"

namespace specdec::cli {

// ------------------------------------------------------------------------ terminal

bool interactive() {
  static const bool value = isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0;
  return value;
}

namespace {
ColourMode& colour_mode() {
  static ColourMode mode = ColourMode::automatic;
  return mode;
}
}  // namespace

void set_colour_mode(ColourMode mode) { colour_mode() = mode; }

bool use_colour() {
  switch (colour_mode()) {
    case ColourMode::on:
      return true;
    case ColourMode::off:
      return false;
    case ColourMode::automatic:
      break;
  }
  static const bool value = isatty(STDOUT_FILENO) != 0 && std::getenv("NO_COLOR") == nullptr;
  return value;
}

void Progress::update(std::string_view message) {
  if (!enabled_) return;
  // "\r" back to the start of the line, "\x1b[K" erases what a longer previous message left.
  fmt::print(stderr, "\r\x1b[K{}", message);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::clear() {
  if (!shown_) return;
  fmt::print(stderr, "\r\x1b[K");
  std::fflush(stderr);
  shown_ = false;
}

namespace {
int g_log_threshold = static_cast<int>(LogLevel::info);

void log_line(LogLevel level, std::string_view kind, std::string_view message) {
  if (!logs(level)) return;
  std::fflush(stdout);  // keep the order of what a terminal shows
  fmt::print(stderr, "specdec: {}: {}\n", kind, message);
}
}  // namespace

void set_log_threshold(int threshold) { g_log_threshold = threshold; }

bool logs(LogLevel level) { return static_cast<int>(level) <= g_log_threshold; }

void redirect_stderr(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd < 0)
    throw UsageError(
        fmt::format("--log-file {}: cannot open for writing: {}", path, std::strerror(errno)));
  std::fflush(stderr);
  const bool moved = ::dup2(fd, STDERR_FILENO) >= 0;
  ::close(fd);
  if (!moved) throw UsageError(fmt::format("--log-file {}: {}", path, std::strerror(errno)));
}

void warn(std::string_view message) { log_line(LogLevel::warning, "warning", message); }
void note(std::string_view message) { log_line(LogLevel::info, "note", message); }
void debug(std::string_view message) { log_line(LogLevel::debug, "debug", message); }

// ------------------------------------------------------------------------ output

void write_stdout(std::string_view text) {
  if (!text.empty() && std::fwrite(text.data(), 1, text.size(), stdout) != text.size())
    throw Error(fmt::format("cannot write to stdout: {}", std::strerror(errno)));
  flush_stdout();
}

void flush_stdout() {
  if (std::fflush(stdout) != 0)
    throw Error(fmt::format("cannot write to stdout: {}", std::strerror(errno)));
}

namespace {

// The files OutputFile created and has not written yet, for the second Ctrl-C: it ends the
// process with _exit, which runs no destructor, so its handler removes them itself (unlink is
// async-signal-safe). Fixed-size slots: the handler must not touch std::string or the heap.
struct CreatedFile {
  std::atomic<bool> live{false};
  char path[4096] = {};
};
CreatedFile g_created[4];

CreatedFile* register_created(const std::string& path) {
  if (path.size() >= sizeof(CreatedFile::path)) return nullptr;
  for (CreatedFile& slot : g_created)
    if (!slot.live.load()) {
      std::memcpy(slot.path, path.c_str(), path.size() + 1);
      slot.live.store(true);
      return &slot;
    }
  return nullptr;
}

void remove_created_files_from_signal_handler() {
  for (CreatedFile& slot : g_created)
    if (slot.live.load()) ::unlink(slot.path);
}

}  // namespace

OutputFile::OutputFile(std::string flag, std::string path)
    : flag_(std::move(flag)), path_(std::move(path)) {
  // Not truncated yet: a command that fails before its end leaves an existing file as it was.
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0 && errno == ENOENT) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    created_ = fd_ >= 0;
  }
  if (fd_ < 0)
    throw UsageError(
        fmt::format("{} {}: cannot open for writing: {}", flag_, path_, std::strerror(errno)));
  if (created_) slot_ = register_created(path_);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (created_ && !written_) ::unlink(path_.c_str());
  if (slot_ != nullptr) static_cast<CreatedFile*>(slot_)->live.store(false);
}

void OutputFile::write(std::string_view bytes) {
  const auto fail = [&](const char* what) {
    throw Error(fmt::format("{} {}: {}: {}", flag_, path_, what, std::strerror(errno)));
  };
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat");
  if (S_ISREG(st.st_mode) && ::ftruncate(fd_, 0) != 0) fail("cannot truncate");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write failed");
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("write failed");  // NFS and friends report errors here
  written_ = true;
  if (slot_ != nullptr) static_cast<CreatedFile*>(slot_)->live.store(false);
  slot_ = nullptr;
}

// ------------------------------------------------------------------------ interrupts

namespace {

// The signals that stop a command cleanly: Ctrl-C, `kill`/timeout/systemd/docker stop, and a
// closed terminal. Each has the same first effect; SIGTERM and SIGHUP also end a chat.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_interrupts{0};  // SIGINTs since the last reset_interrupts()
std::atomic<int> g_terminate{0};   // the first SIGTERM or SIGHUP, never reset (0: none)
std::atomic<int> g_first{0};       // the first stop signal of the run: the exit status
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");
std::atomic<const char*> g_note{nullptr};   // what the first SIGINT prints
int g_wake[2] = {-1, -1};                   // the self-pipe behind interrupt_fd()
bool g_was_tty[3] = {false, false, false};  // stdin, stdout, stderr when the handler was set
struct sigaction g_previous[3]{};

void write_note(const char* note) {
  std::size_t n = 0;
  while (note[n] != '\0') ++n;
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, note, n);
}

extern "C" void on_stop_signal(int sig) {
  // Only async-signal-safe calls here: atomics, open/dup2/write/unlink(2) and _exit(2).
  int none = 0;
  g_first.compare_exchange_strong(none, sig);
  if (g_interrupts.load() > 0 || g_terminate.load() != 0) {  // the second one: quit now
    remove_created_files_from_signal_handler();
    _exit(128 + g_first.load());
  }
  if (sig == SIGINT) {
    g_interrupts.fetch_add(1);
    if (const char* note = g_note.load()) write_note(note);
  } else {
    g_terminate.store(sig);
    if (sig == SIGHUP) {
      // The terminal is gone: what was shown on it is written nowhere (a write would fail with
      // EIO and end the command before its files are written), and it sends no more input.
      const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      if (null >= 0) {
        for (int fd = 0; fd < 3; ++fd)
          if (g_was_tty[fd]) ::dup2(null, fd);
        ::close(null);
      }
    } else {
      write_note("\nspecdec: terminated: stopping after this round, writing what was asked for\n");
    }
  }
  if (g_wake[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(g_wake[1], &byte, 1);
  }
}

}  // namespace

InterruptHandler::InterruptHandler(const char* note) {
  g_note.store(note);
  if (g_wake[0] < 0 && ::pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) g_wake[0] = g_wake[1] = -1;
  for (int fd = 0; fd < 3; ++fd) g_was_tty[fd] = isatty(fd) != 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (const int sig : kStopSignals) sigaddset(&action.sa_mask, sig);  // one handler at a time
  action.sa_flags = SA_RESTART;  // reads and writes in progress carry on
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    sigaction(kStopSignals[i], &action, &g_previous[i]);
}

InterruptHandler::~InterruptHandler() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i)
    sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

bool interrupted() { return g_interrupts.load() > 0 || g_terminate.load() != 0; }

bool terminating() { return g_terminate.load() != 0; }

int interrupted_exit_status() {
  const int sig = g_first.load();
  return sig != 0 ? 128 + sig : kInterruptedExit;
}

void reset_interrupts(const char* note) {
  g_note.store(note);
  g_interrupts.store(0);
  if (g_terminate.load() != 0) return;  // the command is ending: nothing is forgotten
  g_first.store(0);
  if (g_wake[0] >= 0) {  // drain the wake-ups of the SIGINTs forgotten
    char buffer[64];
    while (::read(g_wake[0], buffer, sizeof buffer) > 0) {
    }
  }
}

int interrupt_fd() { return g_wake[0]; }

// ------------------------------------------------------------------------ backends

const char* backend_name(Backend backend) { return backend == Backend::cuda ? "cuda" : "cpu"; }

namespace {

/// Why --backend cuda cannot run here, or "" when it can.
std::string cuda_unavailable() {
#if SPECDEC_CLI_CUDA
  if (cuda::device_count() > 0) return {};
  const std::string why = cuda::device_count_error();
  return fmt::format("no CUDA device is present (cudaGetDeviceCount: {})",
                     why.empty() ? std::string("0 devices") : why);
#else
  return "this specdec was built without the CUDA backend (nvcc was not found when it was "
         "configured; docs/cuda.md)";
#endif
}

}  // namespace

Backend BackendFlag::resolve() const {
  std::string name = text;
  const char* from = "--backend";
  if (name.empty()) {
    if (const char* env = std::getenv("SPECDEC_BACKEND"); env != nullptr && *env != '\0') {
      name = env;
      from = "SPECDEC_BACKEND";
    }
  }
  if (name.empty()) return cuda_unavailable().empty() ? Backend::cuda : Backend::cpu;
  if (name == "cpu") return Backend::cpu;
  if (name != "cuda")
    throw UsageError(fmt::format("{} {}: the backends are cpu and cuda", from, name));
  if (const std::string why = cuda_unavailable(); !why.empty())
    throw Error(fmt::format("{} cuda: {}; use --backend cpu", from, why));
  return Backend::cuda;
}

void add_backend_flag(CLI::App& cmd, BackendFlag& flag) {
  cmd.add_option("--backend", flag.text,
                 "cpu or cuda (default: $SPECDEC_BACKEND, else cuda when this binary has the CUDA "
                 "backend and a GPU is present, else cpu); applies to target and draft")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

// ------------------------------------------------------------------------ models

LoadedModel open_model_file(const std::string& path, std::string_view role) {
  Progress progress;
  progress.update(fmt::format("loading {} {} ...", role, path));
  LoadedModel file = specdec::load_model(path);
  if (logs(LogLevel::debug)) {
    progress.clear();
    const ModelConfig& c = file.config;
    debug(fmt::format(
        "{} {}: {}, {} layers, dim {}, {} heads ({} KV), ffn {}, vocab {}, trained "
        "context {}; tokenizer: {}",
        role, path, c.architecture, c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.ffn_dim,
        c.vocab_size, c.context_length, file.tokenizer ? file.tokenizer->summary() : "none"));
  }
  return file;
}

std::size_t context_positions(const LoadedModel& file, std::string_view role,
                              const ModelFlags& flags) {
  const bool draft = role == "draft";
  const std::optional<std::size_t>& requested =
      draft && flags.context_draft ? flags.context_draft : flags.context;
  const char* flag = draft && flags.context_draft ? "-cd" : "-c";
  const std::size_t trained = file.config.context_length;
  if (!requested) return std::min(trained, kDefaultContext);
  if (*requested == 0) return trained;
  if (*requested > trained)
    warn(fmt::format(
        "{} {} is more than the {} was trained for ({} positions): text past position {} may "
        "degrade",
        flag, *requested, role, trained, trained));
  return *requested;
}

cpu::Options model_options(const LoadedModel& file, std::string_view role,
                           const ModelFlags& flags) {
  cpu::Options o;
  o.kv_type = flags.kv_type();
  o.threads = role == "draft" && flags.threads_draft ? *flags.threads_draft : flags.threads;
  o.context_length = context_positions(file, role, flags);
  o.repack_weights = flags.repack;
  return o;
}

namespace {
/// CPUs this process may run on (its affinity mask).
std::size_t usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<std::size_t>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

#if SPECDEC_CLI_CUDA
/// The CUDA backend's options of a model: the context and the KV cache type of the flags (the
/// weights in f16). The emulated build (tests) runs its kernels with small blocks, which the
/// emulator executes faster.
cuda::Options cuda_model_options(const LoadedModel& file, std::string_view role,
                                 const ModelFlags& flags) {
  cuda::Options o;
  o.kv_type = flags.kv_type();
  o.context_length = context_positions(file, role, flags);
#if SPECDEC_CUDA_EMULATION
  o.norm_threads = 64;
  o.attention_warps = 2;
  o.sampling_threads = 64;
#endif
  return o;
}
#endif

template <>
void start_models<cpu::Transformer>(std::span<Model<cpu::Transformer>* const> models,
                                    const ModelFlags& flags) {
  std::vector<cpu::Options> options;
  for (const auto* m : models) options.push_back(model_options(m->file, m->role, flags));
  // The KV caches are allocated whole: check that all of them fit before allocating any.
  std::size_t total = 0;
  std::string parts;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const auto e = cpu::Transformer::estimate_memory(models[i]->file.config, options[i]);
    total += e.total();
    parts += fmt::format("{}{} {} positions, {}", parts.empty() ? "" : "; ", models[i]->role,
                         e.context_length, cpu::format_bytes(e.total()));
  }
  if (const auto available = cpu::available_memory(); available && total > available->bytes) {
    const bool f32 = !options.empty() && options[0].kv_type == KvType::f32;
    throw Error(fmt::format(
        "the KV cache{} need{} {} ({}) but {} allows {}: give a shorter context with -c N (the "
        "default is the model's context, at most {}){}",
        models.size() > 1 ? "s" : "", models.size() > 1 ? "" : "s", cpu::format_bytes(total), parts,
        available->limit, cpu::format_bytes(available->bytes), kDefaultContext,
        f32 ? ", or halve it with --cache-type-k f16 --cache-type-v f16" : ""));
  }
  const std::size_t cpus = usable_cpus();
  for (std::size_t i = 0; i < models.size(); ++i) {
    const std::size_t threads = options[i].threads;
    if (threads > cpus && (i == 0 || threads != options[i - 1].threads))
      warn(fmt::format(
          "{} threads for the {} but this process may use {} CPU{}: the extra threads only take "
          "turns (slower, not faster)",
          threads, models[i]->role, cpus, cpus == 1 ? "" : "s"));
    Progress progress;
    progress.update(
        fmt::format("starting {} ({} positions) ...", models[i]->role, options[i].context_length));
    models[i]->lm = std::make_unique<cpu::Transformer>(models[i]->file, options[i]);
  }
}

#if SPECDEC_CLI_CUDA
template <>
void start_models<cuda::Transformer>(std::span<Model<cuda::Transformer>* const> models,
                                     const ModelFlags& flags) {
  for (auto* m : models) {
    const cuda::Options options = cuda_model_options(m->file, m->role, flags);
    Progress progress;
    progress.update(
        fmt::format("uploading {} to the GPU ({} positions) ...", m->role, options.context_length));
    try {
      m->lm = std::make_unique<cuda::Transformer>(m->file, options);
    } catch (const Error& e) {
      throw Error(fmt::format("{} {}: {}", m->role, m->file.source, e.what()));
    }
  }
}
#endif

nlohmann::json logprobs_json(const Tokenizer* tokenizer,
                             std::span<const sampling::TokenLogprob> logprobs) {
  const auto entry = [tokenizer](token_t id, float logprob) {
    return nlohmann::json{{"id", id},
                          {"token", tokenizer ? tokenizer->token_bytes(id) : std::string()},
                          {"logprob", logprob}};
  };
  nlohmann::json out = nlohmann::json::array();
  for (const sampling::TokenLogprob& lp : logprobs) {
    nlohmann::json j = entry(lp.token, lp.logprob);
    j["top_logprobs"] = nlohmann::json::array();
    for (const sampling::TopLogprob& t : lp.top)
      j["top_logprobs"].push_back(entry(t.token, t.logprob));
    out.push_back(std::move(j));
  }
  return out;
}

void check_penalties(const sampling::Penalties& penalties, const LoadedModel& target) {
  try {
    sampling::validate(penalties, target.config.vocab_size);
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string prefix = "Penalties: ";
    throw Error("--logit-bias: " + (what.starts_with(prefix) ? what.substr(prefix.size()) : what));
  }
}

// ------------------------------------------------------------------------ decoding

/// The decoder of the setup: a session of one of the four types (the library's make_session).
/// The sessions a decoder may hold over LM: one per drafter kind, and draft model trees where
/// LM scores token trees (the CPU backend).
template <class LM>
struct SessionVariant {
  using type = std::variant<std::unique_ptr<OwnedSession<PlainSession<LM>>>,
                            std::unique_ptr<OwnedSession<ModelSession<LM>>>,
                            std::unique_ptr<OwnedSession<NGramSession<LM>>>,
                            std::unique_ptr<OwnedSession<LookupModelSession<LM>>>,
                            std::unique_ptr<OwnedSession<SuffixSession<LM>>>>;
};
template <HostTreeCausalLM LM>
struct SessionVariant<LM> {
  using type = std::variant<std::unique_ptr<OwnedSession<PlainSession<LM>>>,
                            std::unique_ptr<OwnedSession<ModelSession<LM>>>,
                            std::unique_ptr<OwnedSession<NGramSession<LM>>>,
                            std::unique_ptr<OwnedSession<LookupModelSession<LM>>>,
                            std::unique_ptr<OwnedSession<SuffixSession<LM>>>,
                            std::unique_ptr<OwnedSession<ModelTreeSession<LM>>>,
                            std::unique_ptr<OwnedSession<SuffixModelSession<LM>>>>;
};

template <class LM>
struct Decoder<LM>::Impl {
  typename SessionVariant<LM>::type owned;

  /// f(session) with whichever session the setup made.
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit([&](const auto& o) -> decltype(auto) { return f(o->session()); }, owned);
  }
};

template <class LM>
Decoder<LM>::Decoder(Model<LM>& target, Model<LM>* draft, const DecodeSetup& setup)
    : impl_(std::make_unique<Impl>()) {
  if (setup.uses_draft_model() && (draft == nullptr || !draft->lm))
    throw Error("a draft model is needed (--draft)");
  SessionModels<LM> models;
  models.target = target.lm.get();
  models.tokenizer = target.file.tokenizer.get();
  if (draft != nullptr) {
    models.draft = draft->lm.get();
    models.draft_tokenizer = draft->file.tokenizer.get();
  }
  with_session_type<LM>(setup.drafter, [&]<class Session>(std::type_identity<Session>) {
    impl_->owned = make_session<Session>(setup, models);
  });
}

template <class LM>
Decoder<LM>::~Decoder() = default;

template <class LM>
GenerationResult Decoder<LM>::generate(std::span<const token_t> prompt,
                                       const GenerationConfig& config, const Callbacks& callbacks) {
  return impl_->visit([&](auto& session) {
    session.start(prompt, config, callbacks);
    return session.run();
  });
}

template <class LM>
GenerationResult Decoder<LM>::continue_with(std::span<const token_t> tokens,
                                            const GenerationConfig& config,
                                            const Callbacks& callbacks) {
  return impl_->visit([&](auto& session) {
    session.append(tokens, config, callbacks);
    return session.run();
  });
}

template <class LM>
const std::vector<token_t>& Decoder<LM>::sequence() const {
  return impl_->visit(
      [](auto& session) -> const std::vector<token_t>& { return session.sequence(); });
}

template class Decoder<cpu::Transformer>;
#if SPECDEC_CLI_CUDA
template class Decoder<cuda::Transformer>;
#endif

void check_prompt_fits(std::size_t tokens, std::size_t context, std::string_view source) {
  // The first generated token needs one more position than the prompt.
  if (tokens >= context)
    throw Error(fmt::format(
        "{}: the prompt is {} tokens long but the target's context holds {} (at most {} prompt "
        "tokens leave room to generate; -c sets the context)",
        source, tokens, context, context - 1));
}

std::vector<token_t> encode_prompt(const Tokenizer& tokenizer, std::size_t context,
                                   std::string_view text, std::string_view source) {
  std::vector<token_t> ids = tokenizer.encode(text, true);
  if (ids.empty()) throw Error(fmt::format("{}: the prompt is empty", source));
  check_prompt_fits(ids.size(), context, source);
  return ids;
}

StreamPrinter::StreamPrinter(bool speculative) : speculative_(speculative), colour_(use_colour()) {}

Callbacks StreamPrinter::callbacks() {
  Callbacks c;
  c.on_token = [this](const TokenEvent& e) {
    if (!speculative_) {
      write_stdout(e.text);
    } else if (e.token < 0) {
      tail_ += e.text;  // the final flush, after the last round
    } else {
      pending_.emplace_back(e.text);
    }
  };
  if (speculative_) c.on_round = [this](const RoundRecord& r) { print_round(r.accepted); };
  return c;
}

void StreamPrinter::print_round(std::size_t accepted) {
  std::string text;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const bool drafted = i < accepted;
    if (colour_ && drafted && !pending_[i].empty())
      text += "\x1b[32m" + pending_[i] + "\x1b[0m";
    else
      text += pending_[i];
  }
  pending_.clear();
  write_stdout(text);
}

void StreamPrinter::finish() {
  print_round(0);
  write_stdout(tail_ + "\n");
  tail_.clear();
}

// ------------------------------------------------------------------------ prompts, output

std::string read_stdin() {
  // Polled beside interrupt_fd(): a SIGTERM or SIGHUP while the prompt is still coming ends the
  // command (a SIGINT only marks the generation as cancelled, as before it starts).
  std::string text;
  for (;;) {
    if (terminating()) throw Terminated();
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    const int ready = ::poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1);
    if (ready < 0 && errno != EINTR)
      throw Error(fmt::format("stdin: poll failed: {}", std::strerror(errno)));
    if (ready <= 0 || (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
      if (fds[1].revents != 0 && !terminating()) {  // a SIGINT: its wake-up is consumed
        char buffer[64];
        while (::read(interrupt_fd(), buffer, sizeof buffer) > 0) {
        }
      }
      continue;
    }
    char chunk[65536];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("stdin: read failed: {}", std::strerror(errno)));
    if (n == 0) return text;
    text.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<EvalPrompt> read_eval_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("{}: cannot open file", path));
  std::vector<EvalPrompt> prompts;
  std::size_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      prompts.push_back({j.value("domain", std::string("all")), j.at("text").get<std::string>()});
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}:{}: expected {{\"domain\": ..., \"text\": ...}}: {}", path,
                              line_number, e.what()));
    }
  }
  if (prompts.empty()) throw Error(fmt::format("{}: no prompts in the file", path));
  return prompts;
}

namespace {
/// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0 && c >= 0xc2)
    n = 2;
  else if ((c & 0xf0) == 0xe0)
    n = 3;
  else if ((c & 0xf8) == 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t j = 1; j < n; ++j)
    if ((static_cast<unsigned char>(s[i + j]) & 0xc0) != 0x80) return 0;
  return n;
}
}  // namespace

std::string display_token(const Tokenizer& tokenizer, token_t id) {
  const std::string bytes = tokenizer.token_bytes(id);
  if (bytes.empty()) return std::string(tokenizer.token_piece(id));
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    if (const std::size_t n = utf8_sequence(bytes, i)) {
      out.append(bytes, i, n);
      i += n;
    } else {
      out += fmt::format("<0x{:02X}>", static_cast<unsigned char>(bytes[i]));
      ++i;
    }
  }
  return out;
}

nlohmann::json stats_json(const GenerationStats& stats) {
  nlohmann::json j = nlohmann::json::object();
  stats.for_each_field([&](std::string_view name, auto value) { j[std::string(name)] = value; });
  j["accepted_histogram"] = stats.accepted_histogram;
  return j;
}

std::string stats_line(const GenerationResult& result, bool speculative) {
  const GenerationStats& s = result.stats;
  std::string line = fmt::format(
      "{} tokens in {:.3f} s ({:.1f} tok/s, prefill {:.3f} s excluded) | {} target passes",
      s.tokens_emitted, s.decode_seconds, s.tokens_per_second, s.prefill_seconds, s.target_passes);
  if (speculative)
    line += fmt::format(", {:.2f} tokens/round, acceptance {:.3f} ({}/{} drafted)",
                        s.mean_tokens_per_round, s.acceptance_rate, s.accepted, s.drafted);
  line += fmt::format(" | stop: {}", to_string(result.stop_reason));
  return line;
}

double as_typed(float value) { return std::stod(fmt::format("{}", value)); }

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void print_json(const nlohmann::json& j) { write_stdout(json_text(j)); }

namespace {
std::string& command_line_storage() {
  static std::string line;
  return line;
}
}  // namespace

void set_command_line(int argc, char** argv) {
  std::string& line = command_line_storage();
  line = "specdec";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$`") == std::string::npos;
    line += ' ';
    if (plain) {
      line += arg;
    } else {  // single-quoted for a POSIX shell
      line += '\'';
      for (const char c : arg) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
      line += '\'';
    }
  }
}

const std::string& command_line() { return command_line_storage(); }

// ------------------------------------------------------------------------ demo models

std::filesystem::path find_models_dir(const std::optional<std::string>& override_dir) {
  namespace fs = std::filesystem;
  const auto has_pair = [](const fs::path& dir) {
    std::error_code ec;
    return fs::exists(dir / kDemoTarget, ec) && fs::exists(dir / kDemoDraft, ec);
  };
  if (override_dir) {
    if (!has_pair(*override_dir))
      throw Error(fmt::format("--models-dir {}: no {} and {} there", *override_dir, kDemoTarget,
                              kDemoDraft));
    return *override_dir;
  }
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("SPECDEC_MODELS_DIR")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    candidates.push_back(bin / "models");
    candidates.push_back(bin.parent_path() / "models");
    candidates.push_back(bin.parent_path() / "share" / "specdec" / "models");
  }
  candidates.emplace_back(SPECDEC_SOURCE_MODELS_DIR);  // the source tree, baked in at build time
  for (const auto& dir : candidates)
    if (has_pair(dir)) return dir;
  std::string looked;
  for (const auto& dir : candidates) looked += (looked.empty() ? "" : ", ") + dir.string();
  throw Error(fmt::format("the demo models ({}, {}) are in none of: {} (use --models-dir DIR)",
                          kDemoTarget, kDemoDraft, looked));
}

}  // namespace specdec::cli
