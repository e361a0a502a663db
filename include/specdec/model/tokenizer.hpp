#pragma once
// One interface for the two tokenizer families (SentencePiece BPE, GPT-2 byte-level BPE).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"

namespace specdec {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Text -> ids. add_special applies the model's BOS/EOS rules (e.g. Llama: prepend <s>).
  [[nodiscard]] virtual std::vector<token_t> encode(std::string_view text, bool add_special = true) const = 0;
  /// Ids -> text, as the reference tokenizer decodes (special tokens are skipped).
  [[nodiscard]] virtual std::string decode(std::span<const token_t> ids) const = 0;
  /// The raw bytes a token stands for in the middle of a text (used by streaming detokenizer).
  [[nodiscard]] virtual std::string token_bytes(token_t id) const = 0;
  /// The token's piece as stored in the vocabulary (for display).
  [[nodiscard]] virtual std::string_view token_piece(token_t id) const = 0;

  [[nodiscard]] virtual std::size_t vocab_size() const = 0;
  [[nodiscard]] virtual token_t bos() const = 0;  ///< -1 when none
  [[nodiscard]] virtual token_t eos() const = 0;  ///< -1 when none
  [[nodiscard]] virtual std::string summary() const = 0;  ///< one line: family, vocab, specials
};

/// Streaming detokenizer: push ids one at a time, get the text that became final. Never emits
/// half a UTF-8 character; flush() returns what is left (invalid bytes as U+FFFD).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(token_t id);
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::vector<token_t> ids_;
  std::size_t emitted_ = 0;  ///< bytes of decode(ids_) already returned
};

}  // namespace specdec

namespace specdec {

/// Everything a tokenizer is built from, whatever file carried it. GGUF metadata
/// (tokenizer.ggml.*), a SentencePiece tokenizer.model and a Hugging Face tokenizer.json all
/// become one of these; make_tokenizer() builds the tokenizer.
struct TokenizerSpec {
  std::string model;                 ///< "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;                   ///< byte-level pre-tokenizer: "llama-bpe" (Llama 3), "qwen2", "gpt2", ...
  std::vector<std::string> tokens;   ///< piece of each id
  std::vector<float> scores;         ///< SentencePiece merge priorities (empty for gpt2)
  std::vector<std::int32_t> token_types;  ///< 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   ///< gpt2: "a b" in rank order
  token_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;      ///< SentencePiece add_dummy_prefix
  bool byte_fallback = true;
};

/// Builds the tokenizer a spec describes; throws specdec::Error on an inconsistent spec.
std::shared_ptr<const Tokenizer> make_tokenizer(const TokenizerSpec& spec);
/// Reads a SentencePiece tokenizer.model (protobuf) into a spec, without libsentencepiece.
TokenizerSpec read_sentencepiece_model(const std::string& path);
/// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json beside it when present).
TokenizerSpec read_hf_tokenizer_json(const std::string& path);

}  // namespace specdec
