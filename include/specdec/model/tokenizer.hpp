#pragma once
// One interface for the two tokenizer families (SentencePiece BPE, GPT-2 byte-level BPE).
//
// Each family reproduces its reference implementation exactly, including its corner cases
// (checked by tests/tokenizer against fixtures the references produced):
//   SentencePiece BPE  the `sentencepiece` library (Llama 2, Mistral, TinyLlama): score-ordered
//                      merges, byte fallback, the dummy-prefix space, invalid UTF-8 bytes
//                      replaced by U+FFFD one byte at a time.
//   byte-level BPE     Hugging Face `tokenizers` (GPT-2, Llama 3, Qwen2): added tokens split out
//                      first, the pre-tokenizer regex, rank-ordered merges; invalid UTF-8 input is
//                      replaced by U+FFFD per maximal invalid subsequence (as Python's
//                      bytes.decode("utf-8", "replace") would hand it to the reference).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"

namespace specdec {

/// What decoding carries from one token to the next. decode() and IncrementalDetokenizer run the
/// same per-token step over it, so streaming and whole-sequence decoding cannot disagree.
struct DecodeState {
  std::string pending;   ///< bytes of a UTF-8 character that is not complete yet (at most 3)
  bool at_start = true;  ///< no text produced yet (SentencePiece strips the dummy-prefix space)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Text -> ids. add_special applies the model's BOS/EOS rules (e.g. Llama: prepend <s>).
  [[nodiscard]] virtual std::vector<token_t> encode(std::string_view text,
                                                    bool add_special = true) const = 0;
  /// Text in which special tokens are written out (a chat template's output: "<s>[INST] hi
  /// [/INST]", "<|im_start|>user\n...") -> ids, as llama.cpp tokenizes with parse_special: the
  /// text of every control (and unknown) token becomes its id, and the text between them is
  /// encoded as encode() encodes a text (SentencePiece: each such piece with its dummy-prefix
  /// space, as llama.cpp does after a special token). Byte-level BPE's encode() already cuts
  /// control tokens out of the text (as Hugging Face tokenizers do), so there the two agree.
  [[nodiscard]] virtual std::vector<token_t> encode_special(std::string_view text,
                                                            bool add_special = true) const {
    return encode(text, add_special);
  }
  /// Ids -> text, as the reference tokenizer decodes (special tokens are skipped). Throws
  /// specdec::Error for an id outside [0, vocab_size()).
  [[nodiscard]] virtual std::string decode(std::span<const token_t> ids) const;
  /// The raw bytes a token stands for in the middle of a text (used by streaming detokenizer).
  [[nodiscard]] virtual std::string token_bytes(token_t id) const = 0;
  /// The token's piece as stored in the vocabulary (for display).
  [[nodiscard]] virtual std::string_view token_piece(token_t id) const = 0;
  /// Whether the token is a control token ("<s>", "<|im_end|>"): one that decoding skips.
  [[nodiscard]] virtual bool is_control(token_t id) const {
    (void)id;
    return false;
  }

  /// One step of decoding: appends to `out` the text that token `id` makes final. Bytes of an
  /// unfinished UTF-8 character wait in `state`.
  virtual void decode_step(DecodeState& state, token_t id, std::string& out) const = 0;
  /// End of the sequence: appends what is left in `state` (an unfinished character as U+FFFD).
  virtual void decode_finish(DecodeState& state, std::string& out) const = 0;

  /// An upper bound on the bytes of text that one token of encode() / encode_special() stands
  /// for, so that a text longer than max_bytes_per_token() * N bytes is known to need more than N
  /// tokens without being tokenized (a server refuses a prompt past its context that way, in
  /// bounded memory). nullopt when no bound holds: a tokenizer that collapses runs of spaces or
  /// of unknown characters into one token can encode any length in a few tokens.
  [[nodiscard]] virtual std::optional<std::size_t> max_bytes_per_token() const {
    return std::nullopt;
  }

  [[nodiscard]] virtual std::size_t vocab_size() const = 0;
  [[nodiscard]] virtual token_t bos() const = 0;          ///< -1 when none
  [[nodiscard]] virtual token_t eos() const = 0;          ///< -1 when none
  [[nodiscard]] virtual std::string summary() const = 0;  ///< one line: family, vocab, specials
};

/// Streaming detokenizer: push ids one at a time, get the text that became final. Never emits
/// half a UTF-8 character; flush() returns what is left (invalid bytes as U+FFFD). The
/// concatenation of every push() and a final flush() equals tok.decode(all ids).
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(token_t id);
  std::string flush();

 private:
  const Tokenizer* tok_;
  DecodeState state_;
};

}  // namespace specdec

namespace specdec {

/// Everything a tokenizer is built from, whatever file carried it. GGUF metadata
/// (tokenizer.ggml.*), a SentencePiece tokenizer.model and a Hugging Face tokenizer.json all
/// become one of these; make_tokenizer() builds the tokenizer.
struct TokenizerSpec {
  std::string model;  ///< "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
  std::string pre;    ///< byte-level pre-tokenizer: "llama-bpe" (Llama 3), "qwen2", "gpt2", ...
  std::vector<std::string> tokens;  ///< piece of each id
  std::vector<float> scores;        ///< SentencePiece merge priorities (empty for gpt2)
  std::vector<std::int32_t>
      token_types;  ///< 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;  ///< gpt2: "a b" in rank order
  token_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  ///< SentencePiece add_dummy_prefix
  bool byte_fallback = true;

  // Refinements (defaults keep what the fields above say):
  /// byte-level: the Split regexes of a tokenizer.json, applied in order; when empty the regex
  /// follows from `pre` ("none": no regex split at all).
  std::vector<std::string> pre_regexes;
  /// byte-level: a word that is a whole vocabulary entry skips the merges (Llama 3's
  /// ignore_merges). Unset: on for pre "llama-bpe", as llama.cpp does.
  std::optional<bool> ignore_merges;
  /// byte-level: "" (none) or "NFC", applied to the text between added tokens (Qwen2's
  /// tokenizer.json). llama.cpp applies none, so GGUF specs leave it empty.
  std::string normalizer;
  /// SentencePiece normalizer: drop leading/trailing spaces, collapse runs of spaces.
  bool remove_extra_whitespaces = false;
  /// SentencePiece: the text <unk> decodes to (trainer_spec.unk_surface).
  std::string unk_surface = " \xE2\x81\x87 ";
  /// Where the spec came from (a path), for error messages; may be empty.
  std::string source;
};

/// Builds the tokenizer a spec describes; throws specdec::Error on an inconsistent spec.
std::shared_ptr<const Tokenizer> make_tokenizer(const TokenizerSpec& spec);
/// Refuses a draft tokenizer that differs from the target's (vocabulary size, or the piece of any
/// token id): speculative decoding compares the two models' probabilities token id by token id.
/// Throws specdec::Error naming the first difference.
void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft);

/// Reads a SentencePiece tokenizer.model (protobuf) into a spec, without libsentencepiece.
/// add_bos is on (the Llama convention) unless a tokenizer_config.json beside the file says
/// otherwise (add_bos_token / add_eos_token). Refuses what specdec does not implement (unigram
/// models, non-identity normalization rules) with a specdec::Error naming the file.
TokenizerSpec read_sentencepiece_model(const std::string& path);
/// The same from the bytes of a .model file; `name` labels errors (fuzzer, tests).
TokenizerSpec parse_sentencepiece_model(std::string_view bytes, const std::string& name);
/// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json beside it when present).
/// Byte-level BPE only; refuses other models, normalizers and pre-tokenizers it cannot honour.
TokenizerSpec read_hf_tokenizer_json(const std::string& path);

}  // namespace specdec
