#pragma once
// Pieces shared by the tokenizer implementations (not installed).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "specdec/model/tokenizer.hpp"

namespace specdec::detail {

/// Token types as GGUF and the SentencePiece protobuf number them.
enum TokenType : std::int32_t {
  kTypeNormal = 1,
  kTypeUnknown = 2,
  kTypeControl = 3,
  kTypeUserDefined = 4,
  kTypeUnused = 5,
  kTypeByte = 6,
};

/// Hash that lets an unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// Byte trie over a set of strings, for "longest entry that starts here" queries (SentencePiece
/// user-defined pieces, Hugging Face added tokens).
class PrefixTrie {
 public:
  void insert(std::string_view key, token_t value);
  [[nodiscard]] bool empty() const { return nodes_.size() <= 1; }
  /// Length of the longest key that is a prefix of `text` (0: none) and its value.
  [[nodiscard]] std::size_t longest_prefix(std::string_view text, token_t* value) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;  // sorted by byte
    token_t value = -1;                                            // -1: no key ends here
  };
  std::vector<Node> nodes_{Node{}};
};

/// "<0x41>" -> 0x41; -1 for anything else.
int byte_piece_value(std::string_view piece) noexcept;

/// GPT-2's byte-level alphabet: each byte of `bytes` as the character bytes_to_unicode() gives it
/// (a space becomes "Ġ"), UTF-8 encoded. This is how byte-level vocabularies spell tokens.
std::string byte_level_encode(std::string_view bytes);

/// Throws specdec::Error "<source>: <problem>" (or "tokenizer: <problem>" without a source).
[[noreturn]] void spec_error(const TokenizerSpec& spec, const std::string& problem);

std::shared_ptr<const Tokenizer> make_sentencepiece_bpe(const TokenizerSpec& spec);
std::shared_ptr<const Tokenizer> make_byte_level_bpe(const TokenizerSpec& spec);

}  // namespace specdec::detail
