// make_tokenizer(), the default Tokenizer::decode() and the helpers of internal.hpp.

#include <fmt/format.h>

#include <algorithm>

#include "internal.hpp"

namespace specdec {

std::string Tokenizer::decode(std::span<const token_t> ids) const {
  std::string out;
  DecodeState state;
  for (token_t id : ids) decode_step(state, id, out);
  decode_finish(state, out);
  return out;
}

std::shared_ptr<const Tokenizer> make_tokenizer(const TokenizerSpec& spec) {
  if (spec.model == "llama") return detail::make_sentencepiece_bpe(spec);
  if (spec.model == "gpt2") return detail::make_byte_level_bpe(spec);
  detail::spec_error(spec,
                     fmt::format("tokenizer model '{}' is not supported (supported: 'llama' = "
                                 "SentencePiece BPE, 'gpt2' = byte-level BPE)",
                                 spec.model));
}

void check_same_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (draft.vocab_size() != target.vocab_size())
    throw Error(
        fmt::format("the draft's tokenizer has {} tokens but the target's has {}: the pair "
                    "must share one tokenizer",
                    draft.vocab_size(), target.vocab_size()));
  for (std::size_t i = 0; i < target.vocab_size(); ++i) {
    const auto id = static_cast<token_t>(i);
    if (target.token_piece(id) != draft.token_piece(id))
      throw Error(fmt::format(
          "the draft's and the target's tokenizers differ at token {} ('{}' vs '{}'): the pair "
          "must share one tokenizer",
          i, draft.token_piece(id), target.token_piece(id)));
  }
}

namespace detail {

void PrefixTrie::insert(std::string_view key, token_t value) {
  std::size_t node = 0;
  for (char ch : key) {
    const auto byte = static_cast<unsigned char>(ch);
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it != children.end() && it->first == byte) {
      node = static_cast<std::size_t>(it->second);
    } else {
      const auto next = static_cast<std::int32_t>(nodes_.size());
      children.insert(it, {byte, next});
      nodes_.emplace_back();  // invalidates `children`; not used again
      node = static_cast<std::size_t>(next);
    }
  }
  if (nodes_[node].value < 0) nodes_[node].value = value;  // the first of duplicates wins
}

std::size_t PrefixTrie::longest_prefix(std::string_view text, token_t* value) const {
  std::size_t node = 0, best = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), byte,
                               [](const auto& child, unsigned char b) { return child.first < b; });
    if (it == children.end() || it->first != byte) break;
    node = static_cast<std::size_t>(it->second);
    if (nodes_[node].value >= 0) {
      best = i + 1;
      if (value) *value = nodes_[node].value;
    }
  }
  return best;
}

int byte_piece_value(std::string_view piece) noexcept {
  // Exactly "<0x" two upper-case hex digits ">", as sentencepiece writes them.
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void spec_error(const TokenizerSpec& spec, const std::string& problem) {
  throw Error(fmt::format("{}: {}", spec.source.empty() ? "tokenizer" : spec.source, problem));
}

}  // namespace detail
}  // namespace specdec
