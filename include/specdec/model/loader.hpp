#pragma once
// Loading a model from disk: a .gguf file, or a Hugging Face folder (config.json +
// model.safetensors or model.safetensors.index.json + tokenizer files).

#include <memory>
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
};

/// Detects the format from the path. Throws specdec::Error naming the file and the problem.
LoadedModel load_model(const std::string& path);

}  // namespace specdec
