#pragma once
// Loading a model from disk: a .gguf file, or a Hugging Face folder (config.json +
// model.safetensors or model.safetensors.index.json + tokenizer files).

#include <memory>
#include <optional>
#include <string>

#include "specdec/model/config.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/model/weights.hpp"

namespace specdec {

struct LoadedModel {
  ModelConfig config;
  std::shared_ptr<const WeightStore> weights;
  std::shared_ptr<const Tokenizer> tokenizer;  ///< may be null if the files carry none
  std::string source;                          ///< the path it came from
  std::string format;  ///< "GGUF v3", "Hugging Face safetensors (2 shards)", ...
  std::string name;    ///< general.name, or the folder name; may be empty
  /// The chat template's Jinja source as the files carry it: GGUF tokenizer.chat_template, or
  /// the Hugging Face tokenizer_config.json "chat_template" (a string, or a list of named
  /// templates of which "default" is taken), else a chat_template.jinja beside it. Absent when
  /// the files have none (base models). specdec/model/chat_template.hpp renders it.
  std::optional<std::string> chat_template;
};

/// Detects the format from the path: a directory (or its config.json) is a Hugging Face folder,
/// a file starting with "GGUF" is a GGUF file. Config, weights and tokenizer are validated.
/// Throws specdec::Error "<file>: <problem>".
LoadedModel load_model(const std::string& path);

/// Checks that every tensor the config implies is present with the expected shape and a
/// supported dtype: token_embd [vocab, dim], blk.i.attn_q [n_heads * head_dim, dim], ...
/// Throws specdec::Error "<problem>" (callers prefix the file name).
void validate_model_weights(const ModelConfig& config, const WeightStore& weights);

/// Refuses a draft model that cannot draft for the target: a different vocabulary size (from the
/// files' configs, so before any model is started), or tokenizers that differ
/// (check_same_vocabulary). Throws specdec::Error naming both files.
void check_draft_compatible(const LoadedModel& target, const LoadedModel& draft);

/// Human-readable report for `specdec info`: source and format, architecture and config, the
/// tensor table (name, dtype, shape, bytes) and the tokenizer summary.
std::string describe_model(const LoadedModel& model);

}  // namespace specdec
