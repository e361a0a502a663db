#include "common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "demo_models.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/speculative.hpp"

namespace specdec::cli {

// ------------------------------------------------------------------------ terminal

bool interactive() {
  static const bool value = isatty(STDOUT_FILENO) != 0 && isatty(STDERR_FILENO) != 0;
  return value;
}

bool use_colour() {
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

// ------------------------------------------------------------------------ models

const Tokenizer& Model::tokenizer() const {
  if (!file.tokenizer)
    throw Error(file.source +
                ": the model file carries no tokenizer, so text prompts cannot be encoded");
  return *file.tokenizer;
}

Model load_model_for_cpu(const std::string& path, std::string_view role, std::size_t threads) {
  Progress progress;
  progress.update(fmt::format("loading {} {} ...", role, path));
  Model m;
  m.file = specdec::load_model(path);
  cpu::Options options;
  options.threads = threads;
  m.lm = std::make_unique<cpu::Transformer>(m.file, options);
  return m;
}

void check_same_vocabulary(const Model& target, const Model& draft) {
  if (draft.lm->vocab_size() != target.lm->vocab_size())
    throw Error(fmt::format(
        "the draft {} has a vocabulary of {} tokens but the target {} has {}: the pair must share "
        "one tokenizer",
        draft.file.source, draft.lm->vocab_size(), target.file.source, target.lm->vocab_size()));
  if (!draft.file.tokenizer || !target.file.tokenizer) return;  // nothing more to compare
  const Tokenizer& a = *target.file.tokenizer;
  const Tokenizer& b = *draft.file.tokenizer;
  if (a.vocab_size() != b.vocab_size())
    throw Error(fmt::format("the draft's tokenizer has {} tokens but the target's has {}",
                            b.vocab_size(), a.vocab_size()));
  for (std::size_t i = 0; i < a.vocab_size(); ++i) {
    const auto id = static_cast<token_t>(i);
    if (a.token_piece(id) != b.token_piece(id))
      throw Error(fmt::format(
          "the draft's and the target's tokenizers differ at token {} ('{}' vs '{}'): the pair "
          "must share one tokenizer",
          i, b.token_piece(id), a.token_piece(id)));
  }
}

// ------------------------------------------------------------------------ decoding

std::string DecodeSetup::label() const {
  const std::string k_text = adaptive ? std::string("adaptive k") : fmt::format("k={}", k);
  switch (drafter) {
    case Drafter::none:
      return "baseline";
    case Drafter::model:
      return "draft model " + k_text;
    case Drafter::ngram:
      return fmt::format("n-gram (n<={}) {}", ngram, k_text);
  }
  return "?";
}

GenerationResult run_decode(Model& target, Model* draft, const DecodeSetup& setup,
                            std::span<const token_t> prompt, const GenerationConfig& config,
                            const Callbacks& callbacks) {
  const Tokenizer* tokenizer = target.file.tokenizer.get();
  SpeculativeOptions options;
  options.k = setup.k;
  options.adaptive = setup.adaptive;
  switch (setup.drafter) {
    case DecodeSetup::Drafter::none: {
      AutoregressiveDecoder<cpu::Transformer> decoder(*target.lm, tokenizer);
      return decoder.generate(prompt, config, callbacks);
    }
    case DecodeSetup::Drafter::model: {
      if (draft == nullptr) throw Error("a draft model is needed (--draft)");
      SpeculativeDecoder<cpu::Transformer, cpu::Transformer> decoder(
          *draft->lm, *target.lm, options, tokenizer, draft->file.tokenizer.get());
      return decoder.generate(prompt, config, callbacks);
    }
    case DecodeSetup::Drafter::ngram: {
      NGramDrafter::Options ngram;
      ngram.max_ngram = setup.ngram;
      NGramDrafter drafter(ngram);
      SpeculativeDecoder<NGramDrafter, cpu::Transformer> decoder(drafter, *target.lm, options,
                                                                 tokenizer);
      return decoder.generate(prompt, config, callbacks);
    }
  }
  throw Error("unknown drafter");
}

std::vector<token_t> encode_prompt(const Model& target, std::string_view text,
                                   std::string_view source) {
  std::vector<token_t> ids = target.tokenizer().encode(text, true);
  if (ids.empty()) throw Error(fmt::format("{}: the prompt is empty", source));
  const std::size_t context = target.lm->context_length();
  // The first generated token needs one more position than the prompt.
  if (ids.size() >= context)
    throw Error(fmt::format(
        "{}: the prompt is {} tokens long but the target's context holds {} (at most {} prompt "
        "tokens leave room to generate)",
        source, ids.size(), context, context - 1));
  return ids;
}

StreamPrinter::StreamPrinter(bool speculative) : speculative_(speculative), colour_(use_colour()) {}

Callbacks StreamPrinter::callbacks() {
  Callbacks c;
  c.on_token = [this](const TokenEvent& e) {
    if (!speculative_) {
      fmt::print("{}", e.text);
      std::fflush(stdout);
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
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const bool drafted = i < accepted;
    if (colour_ && drafted && !pending_[i].empty())
      fmt::print("\x1b[32m{}\x1b[0m", pending_[i]);
    else
      fmt::print("{}", pending_[i]);
  }
  pending_.clear();
  std::fflush(stdout);
}

void StreamPrinter::finish() {
  print_round(0);
  fmt::print("{}\n", tail_);
  tail_.clear();
  std::fflush(stdout);
}

// ------------------------------------------------------------------------ prompts, output

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

void print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  std::fflush(stdout);
}

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
