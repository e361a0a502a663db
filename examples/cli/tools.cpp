// The model-file subcommands:
//   specdec info FILE [--metadata]                  what a model file or folder holds, and
//                                                   whether generate can run it
//   specdec logits -m M --tokens 1,2,3 --out F      logits of one forward, raw f32 [n x vocab]
//   specdec convert IN.gguf OUT.gguf --type PRESET  requantise as llama-quantize does
//   specdec tokenize -m M --text T                  the ids of a text, as JSON

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "options.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/quant_mix.hpp"

namespace specdec::cli {

namespace {

bool is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

// ------------------------------------------------------------------------ info

struct InfoOptions {
  std::string path;
  bool metadata = false;
};

/// The error for a file generate cannot run: the reason, without the path it may start with.
Error cannot_run(const std::string& path, const std::string& reason) {
  const std::string own =
      reason.rfind(path + ": ", 0) == 0 ? reason.substr(path.size() + 2) : reason;
  return Error(fmt::format("{}: specdec generate cannot run this model: {}", path, own));
}

void run_info(const InfoOptions& o) {
  LoadedModel model;
  try {
    model = specdec::load_model(o.path);
  } catch (const Error& e) {
    // A GGUF that parses but cannot be loaded (say, tensor types specdec cannot compute with):
    // still show what it holds, then report why it cannot be used.
    if (!is_gguf(o.path)) throw;
    std::optional<GgufFile> gguf;
    try {
      gguf = read_gguf(o.path);
    } catch (const Error&) {
    }
    if (gguf) {
      fmt::print("{}tensors as stored:\n", describe_gguf_metadata(*gguf));
      for (const auto& t : gguf->tensors) {
        const char* type = ggml_type_name(t.ggml_type);
        fmt::print("  {:<40} {:<8} [{}] {} bytes{}\n", t.name, type ? type : "?",
                   fmt::join(t.shape, ", "), t.nbytes,
                   t.dtype ? "" : "  (type not supported by specdec)");
      }
      std::fflush(stdout);
    }
    throw cannot_run(o.path, e.what());
  }
  fmt::print("{}", describe_model(model));
  if (o.metadata && is_gguf(o.path)) fmt::print("\n{}", describe_gguf_metadata(read_gguf(o.path)));
  std::fflush(stdout);

  // Whether `generate` can run it: the CPU backend resolves every tensor it needs (names, shapes,
  // types) when it is built; a one-position cache keeps that cheap. generate also needs the
  // tokenizer to encode a text prompt.
  try {
    cpu::Options options;
    options.threads = 1;
    options.context_length = 1;
    const cpu::Transformer lm(model, options);
  } catch (const Error& e) {
    throw cannot_run(o.path, e.what());
  }
  if (!model.tokenizer)
    throw cannot_run(o.path,
                     "it carries no tokenizer to encode a text prompt (specdec logits --tokens "
                     "still works)");
}

// ------------------------------------------------------------------------ logits

struct LogitsOptions {
  std::string model;
  std::vector<std::int64_t> tokens;
  std::string out;
  ModelFlags models;
  BackendFlag backend;
};

/// The logits of `tokens` in host memory (the CUDA backend's are copied from the device).
LogitsView host_logits(cpu::Transformer& lm, std::span<const token_t> tokens) {
  return lm.forward(tokens);
}
#if SPECDEC_CLI_CUDA
LogitsView host_logits(cuda::Transformer& lm, std::span<const token_t> tokens) {
  (void)lm.forward(tokens);
  return lm.logits_to_host();
}
#endif

template <class LM>
void logits_on(const LogitsOptions& o, OutputFile& out) {
  Model<LM> model = load_model_for<LM>(o.model, "model", o.models);
  const std::size_t vocab = model.lm->vocab_size();
  const std::size_t context = model.lm->context_length();
  std::vector<token_t> ids;
  for (const std::int64_t t : o.tokens) {
    if (t < 0 || static_cast<std::uint64_t>(t) >= vocab)
      throw Error(
          fmt::format("--tokens: token id {} is outside the model's vocabulary [0, {})", t, vocab));
    ids.push_back(static_cast<token_t>(t));
  }
  if (ids.size() > context)
    throw Error(fmt::format("--tokens: {} tokens do not fit the model's context of {} (-c sets it)",
                            ids.size(), context));

  const LogitsView logits = host_logits(*model.lm, ids);  // [n x vocab], one forward
  if (logits.rows != ids.size() || logits.vocab != vocab || logits.where != Memory::host)
    throw Error("logits: the backend returned an unexpected logits shape");
  // The file is raw little-endian float32, row-major [n x vocab] (the host's order: specdec
  // only builds on little-endian hosts, see gguf_writer.hpp).
  const std::size_t bytes = logits.rows * logits.vocab * sizeof(float);
  out.write(std::string_view(reinterpret_cast<const char*>(logits.data), bytes));
  fmt::print(stderr, "wrote {} x {} float32 logits ({} bytes) to {}\n", logits.rows, logits.vocab,
             bytes, o.out);
}

void run_logits(const LogitsOptions& o) {
  OutputFile out("--out", o.out);  // checked before the model is loaded
  const Backend backend = o.backend.resolve();
  on_backend(backend, [&]<class LM>(std::type_identity<LM>) { logits_on<LM>(o, out); });
}

// ------------------------------------------------------------------------ tokenize

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_special = false;
};

void run_tokenize(const TokenizeOptions& o) {
  // Only the file's tokenizer is needed: no backend, so any weight type loads.
  const LoadedModel model = specdec::load_model(o.model);
  if (!model.tokenizer) throw Error(fmt::format("{}: the model carries no tokenizer", o.model));
  const std::vector<token_t> ids = model.tokenizer->encode(o.text, !o.no_special);
  fmt::print("{{\"ids\": [{}]}}\n", fmt::join(ids, ", "));
}

// ------------------------------------------------------------------------ convert

struct ConvertOptions {
  std::string in;
  std::string out;
  std::string type;
  bool pure = false;
};

void run_convert(const ConvertOptions& o) {
  std::error_code ec;
  if (std::filesystem::equivalent(o.in, o.out, ec))
    throw Error(fmt::format(
        "convert: the output {} is the input file (it is read while the output is written)",
        o.out));
  const QuantPreset* preset = find_quant_preset(o.type);
  if (preset == nullptr)  // the option's check already refused it; this keeps the code total
    throw Error(fmt::format("--type {}: expected one of {}", o.type, quant_preset_names()));
  { const OutputFile check("convert: the output", o.out); }  // writable, before the work
  const ConvertReport report = convert_gguf(o.in, o.out, *preset, o.pure);
  std::uint64_t before = 0;
  for (const auto& t : report.tensors) {
    fmt::print("  {:<32} [{}] {} -> {} ({} -> {} bytes)\n", t.name, fmt::join(t.shape, ", "),
               dtype_name(t.from), dtype_name(t.to), t.bytes_before, t.bytes_after);
    before += t.bytes_before;
  }
  fmt::print("wrote {} ({}{}): {} tensors, {} bytes of tensor data before, file {} bytes\n", o.out,
             preset->name, o.pure ? ", pure" : "", report.tensors.size(), before,
             report.file_bytes);
}

}  // namespace

void add_info(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info",
                                     "what a model file holds: format, config, tensor table, "
                                     "tokenizer; and whether generate can run it");
  cmd->add_option("file", o->path,
                  "a .gguf file or a Hugging Face folder (exit status 1 when generate cannot run "
                  "it)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_flag("--metadata", o->metadata, "also print every GGUF metadata key");
  cmd->callback([o] { run_info(*o); });
}

void add_logits(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits",
                                     "evaluate token ids in one forward; write all logits as raw "
                                     "little-endian float32 [n x vocab]");
  cmd->add_option("-m,--model", o->model, "a .gguf file or a Hugging Face folder")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--tokens", o->tokens, "comma-separated token ids, e.g. 1,2,3 (no BOS is added)")
      ->required()
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("-o,--out", o->out, "output file")->required();
  add_model_flags(*cmd, o->models, false);
  add_backend_flag(*cmd, o->backend);
  cmd->callback([o] { run_logits(*o); });
}

void add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "the token ids of a text as the model's tokenizer encodes it, as JSON {\"ids\": [...]}");
  cmd->add_option("-m,--model", o->model, "a .gguf file or a Hugging Face folder")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--text", o->text, "the text")->required();
  cmd->add_flag("--no-special", o->no_special, "no BOS/EOS even where the tokenizer adds them");
  cmd->callback([o] { run_tokenize(*o); });
}

void add_convert(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "rewrite a GGUF model in one of llama.cpp's file types, each tensor in the type "
      "llama-quantize gives it (norms and biases stay as they are)");
  cmd->add_option("in", o->in, "input .gguf (tensors of any type specdec reads)")
      ->required()
      ->check(CLI::Validator(
          [](const std::string& v) {
            std::error_code ec;
            if (std::filesystem::is_directory(v, ec))
              return v +
                     " is a folder: convert rewrites .gguf files (generate, chat, bench and "
                     "serve run a Hugging Face folder directly; llama.cpp's "
                     "convert_hf_to_gguf.py makes a .gguf of it)";
            if (!std::filesystem::exists(v, ec)) return "no such file: " + v;
            return std::string{};
          },
          "FILE"));
  cmd->add_option("out", o->out, "output .gguf")->required();
  cmd->add_option("--type", o->type,
                  fmt::format("llama-quantize's preset: {} (any case; Q3_K, Q4_K, Q5_K mean their "
                              "_M mix)",
                              quant_preset_names()))
      ->required()
      ->check(CLI::Validator(
          [](const std::string& v) {
            return find_quant_preset(v)
                       ? std::string{}
                       : fmt::format("{} is not one of {}", v, quant_preset_names());
          },
          "PRESET"));
  cmd->add_flag("--pure", o->pure,
                "every matrix in the preset's base type (llama-quantize --pure; rows that do not "
                "hold whole blocks still fall back)");
  cmd->callback([o] { run_convert(*o); });
}

}  // namespace specdec::cli
