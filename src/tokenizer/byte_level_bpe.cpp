// GPT-2 style byte-level BPE (GPT-2, Llama 3, Qwen2), reproducing Hugging Face `tokenizers`:
//
//   added tokens   control and user-defined tokens are cut out of the raw text first (leftmost,
//                  longest); they become their own ids and the rest is tokenized around them.
//   normalize      NFC when the tokenizer asks for it (Qwen2), on the text between added tokens.
//   pre-tokenize   the remaining text is cut by the pre-tokenizer regex(es) (pretokenizer.hpp).
//   byte level     every byte of a piece is a symbol: the token of the printable character that
//                  GPT-2's bytes_to_unicode() assigns to the byte ("Ġ" for a space, ...).
//   merge          with ignore_merges (Llama 3) a piece that is a whole vocabulary entry is taken
//                  as is; otherwise repeatedly merge the adjacent pair of lowest merge rank (ties:
//                  leftmost), with a priority queue, like tokenizers' Word::merge_all.
//
// Decoding (tokenizers' decode with skip_special_tokens): control tokens vanish without
// interrupting the byte stream; user-defined tokens are copied verbatim and end it; other
// tokens map their characters back to bytes. The byte stream becomes UTF-8 with one U+FFFD per
// maximal invalid subsequence (Rust's String::from_utf8_lossy).

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>
#include <vector>

#include "internal.hpp"
#include "nfc.hpp"
#include "pretokenizer.hpp"
#include "utf8.hpp"

namespace specdec::detail {
namespace {

/// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
/// for U+0100 onwards, in byte order. `byte_to_char[b]` is that character; `char_to_byte[c]` is
/// its inverse for the 324 code points involved (-1 elsewhere).
struct ByteAlphabet {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::int16_t, 324> char_to_byte{};
  ByteAlphabet() {
    char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_char[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      char_to_byte[byte_to_char[static_cast<std::size_t>(b)]] = static_cast<std::int16_t>(b);
    }
  }
};
const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

std::uint64_t pair_key(token_t left, token_t right) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

bool is_llama3_pre(std::string_view pre) {
  return pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
}

class ByteLevelBpe final : public Tokenizer {
 public:
  explicit ByteLevelBpe(const TokenizerSpec& spec);

  [[nodiscard]] std::vector<token_t> encode(std::string_view text, bool add_special) const override;
  [[nodiscard]] std::string token_bytes(token_t id) const override;
  [[nodiscard]] bool is_control(token_t id) const override {
    return types_[checked(id)] == kTypeControl;
  }
  [[nodiscard]] std::string_view token_piece(token_t id) const override {
    return pieces_.at(checked(id));
  }
  void decode_step(DecodeState& state, token_t id, std::string& out) const override;
  void decode_finish(DecodeState& state, std::string& out) const override;
  /// A piece spells each byte it stands for with one or two characters of the byte alphabet (an
  /// added token, with its own bytes): the longest piece bounds a token's bytes. NFC can shorten
  /// a text: a Hangul syllable written as three jamo (9 bytes) becomes one character (3 bytes),
  /// the most any composition saves, so with NFC the bound is three times that.
  [[nodiscard]] std::optional<std::size_t> max_bytes_per_token() const override {
    return longest_piece_ * (nfc_ ? 3 : 1);
  }
  [[nodiscard]] std::size_t vocab_size() const override { return pieces_.size(); }
  [[nodiscard]] token_t bos() const override { return bos_; }
  [[nodiscard]] token_t eos() const override { return eos_; }
  [[nodiscard]] std::string summary() const override;

 private:
  struct Merge {
    std::int32_t rank;
    token_t result;
  };
  [[nodiscard]] std::size_t checked(token_t id) const;
  void encode_segment(std::string_view text, std::vector<token_t>& out) const;
  void encode_word(std::string_view word, std::vector<token_t>& out) const;

  std::vector<std::string> pieces_;
  std::vector<std::int32_t> types_;
  StringMap<token_t> vocab_;  // the BPE model's vocabulary (everything but added tokens)
  PrefixTrie added_;          // control and user-defined tokens, matched in the raw text
  std::array<token_t, 256> byte_token_{};
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  RegexSplitter splitter_;
  bool nfc_ = false;               // NFC-normalize the text between added tokens
  std::size_t longest_piece_ = 1;  // bytes of the longest piece
  std::string pre_name_;
  bool ignore_merges_ = false;
  token_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::string source_;
};

std::vector<std::string> regexes_of(const TokenizerSpec& spec) {
  if (!spec.pre_regexes.empty()) return spec.pre_regexes;
  if (spec.pre == "none") return {};
  try {
    return {pretokenizer_regex(spec.pre)};
  } catch (const Error& e) {
    spec_error(spec, e.what());
  }
}

ByteLevelBpe::ByteLevelBpe(const TokenizerSpec& spec)
    : pieces_(spec.tokens),
      splitter_(regexes_of(spec), spec.source.empty() ? "tokenizer" : spec.source),
      pre_name_(spec.pre_regexes.empty() ? spec.pre : "tokenizer.json regex"),
      ignore_merges_(spec.ignore_merges.value_or(is_llama3_pre(spec.pre))),
      add_bos_(spec.add_bos),
      add_eos_(spec.add_eos),
      source_(spec.source) {
  const std::size_t n = pieces_.size();
  if (n == 0) spec_error(spec, "the byte-level BPE vocabulary is empty");
  if (spec.normalizer == "NFC") {
    nfc_ = true;
  } else if (!spec.normalizer.empty()) {
    spec_error(spec, fmt::format("normalizer '{}' is not supported (only NFC)", spec.normalizer));
  }
  if (n > static_cast<std::size_t>(INT32_MAX))
    spec_error(spec, "the vocabulary has more than 2^31 tokens");
  if (spec.token_types.empty()) {
    types_.assign(n, kTypeNormal);
  } else if (spec.token_types.size() != n) {
    spec_error(spec, fmt::format("{} token types for {} tokens", spec.token_types.size(), n));
  } else {
    types_ = spec.token_types;
  }

  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<token_t>(i);
    longest_piece_ = std::max(longest_piece_, pieces_[i].size());
    if (pieces_[i].empty()) continue;  // unreachable by text; still decodable (to nothing)
    if (types_[i] == kTypeControl || types_[i] == kTypeUserDefined) {
      added_.insert(pieces_[i], id);
    } else {
      vocab_.emplace(pieces_[i], id);  // the first of duplicate pieces wins
    }
  }

  const ByteAlphabet& alphabet = byte_alphabet();
  for (std::size_t b = 0; b < 256; ++b) {
    std::string ch;
    utf8_append(alphabet.byte_to_char[b], ch);
    const auto it = vocab_.find(ch);
    byte_token_[b] = it == vocab_.end() ? -1 : it->second;
  }

  // Merges "left right" in rank order. As in tokenizers, a later duplicate of a pair overrides.
  merges_.reserve(spec.merges.size());
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& merge = spec.merges[rank];
    const std::size_t space = merge.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 >= merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      spec_error(
          spec, fmt::format("merge {} '{}' is not two tokens separated by one space", rank, merge));
    }
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    std::string joined(left);
    joined += right;
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(joined);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      spec_error(spec,
                 fmt::format("merge {} '{}' uses or makes a token that is not in the vocabulary",
                             rank, merge));
    }
    if (rank > static_cast<std::size_t>(INT32_MAX)) spec_error(spec, "more than 2^31 merges");
    merges_[pair_key(l->second, r->second)] = Merge{static_cast<std::int32_t>(rank), m->second};
  }

  const auto in_range = [&](token_t id) {
    return id >= 0 && static_cast<std::size_t>(id) < n ? id : -1;
  };
  bos_ = in_range(spec.bos);
  eos_ = in_range(spec.eos);
  unk_ = in_range(spec.unk);
  if (add_bos_ && bos_ < 0)
    spec_error(spec, "add_bos is set but the BOS token id is missing or out of range");
  if (add_eos_ && eos_ < 0)
    spec_error(spec, "add_eos is set but the EOS token id is missing or out of range");
}

std::size_t ByteLevelBpe::checked(token_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size()) {
    throw Error(fmt::format("{}: token id {} is outside the vocabulary [0, {})",
                            source_.empty() ? "tokenizer" : source_, id, pieces_.size()));
  }
  return static_cast<std::size_t>(id);
}

std::vector<token_t> ByteLevelBpe::encode(std::string_view input, bool add_special) const {
  if (input.size() >= static_cast<std::size_t>(INT32_MAX) / 4) {  // symbol indices are 32-bit
    throw Error(fmt::format("{}: text of {} bytes is too long to tokenize",
                            source_.empty() ? "tokenizer" : source_, input.size()));
  }
  // The reference takes only valid text: invalid bytes become U+FFFD as Python would decode them.
  std::string repaired;
  std::string_view text = input;
  if (!utf8_is_valid(input)) {
    repaired = utf8_repair(input, Utf8Repair::maximal_subpart);
    text = repaired;
  }
  std::vector<token_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) ids.push_back(bos_);
  std::size_t segment_begin = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    token_t added = -1;
    const std::size_t len = added_.empty() ? 0 : added_.longest_prefix(text.substr(pos), &added);
    if (len > 0) {
      encode_segment(text.substr(segment_begin, pos - segment_begin), ids);
      ids.push_back(added);
      pos += len;
      segment_begin = pos;
    } else {
      pos += std::max<std::size_t>(1, utf8_char_len(text.substr(pos)));
    }
  }
  encode_segment(text.substr(segment_begin), ids);
  if (add_special && add_eos_) ids.push_back(eos_);
  return ids;
}

void ByteLevelBpe::encode_segment(std::string_view text, std::vector<token_t>& out) const {
  std::string normalized;
  if (nfc_) {
    normalized = nfc(text);
    text = normalized;
  }
  std::vector<std::string_view> words;
  splitter_.split(text, words);
  for (std::string_view word : words) encode_word(word, out);
}

void ByteLevelBpe::encode_word(std::string_view word, std::vector<token_t>& out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(byte_level_encode(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }

  // One symbol per byte, linked in a list; a merge rewrites the left symbol and kills the right.
  struct Symbol {
    token_t id;
    std::int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    token_t id = byte_token_[static_cast<unsigned char>(c)];
    if (id < 0) id = unk_;
    if (id < 0) continue;  // tokenizers drops a character it has neither a token nor <unk> for
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    std::int32_t rank, pos;
    token_t result;
  };
  // Lowest rank first; equal ranks: leftmost first.
  const auto lower_priority = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower_priority)> queue(
      lower_priority);
  const auto maybe_add = [&](std::int32_t pos) {
    if (pos < 0) return;
    const Symbol& left = symbols[static_cast<std::size_t>(pos)];
    if (left.next < 0) return;
    const auto it =
        merges_.find(pair_key(left.id, symbols[static_cast<std::size_t>(left.next)].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.result});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) maybe_add(static_cast<std::int32_t>(i));

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // Stale entry: the pair at this position is no longer the one that produced it.
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.result != top.result) continue;
    left.id = top.result;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    maybe_add(left.prev);
    maybe_add(top.pos);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    out.push_back(symbols[static_cast<std::size_t>(i)].id);
  }
}

std::string ByteLevelBpe::token_bytes(token_t id) const {
  const std::size_t i = checked(id);
  const std::string& piece = pieces_[i];
  if (types_[i] == kTypeControl) return {};
  if (types_[i] == kTypeUserDefined) return piece;
  // Map each character back to its byte; a token with a character outside the byte alphabet is
  // taken verbatim (what tokenizers' ByteLevel decoder does).
  std::string bytes;
  const ByteAlphabet& alphabet = byte_alphabet();
  for (std::string_view rest = piece; !rest.empty();) {
    const std::size_t len = utf8_char_len(rest);
    const char32_t cp = len == 0 ? char32_t{0xFFFFFFFF} : utf8_decode(rest, len);
    if (cp >= alphabet.char_to_byte.size() || alphabet.char_to_byte[cp] < 0) return piece;
    bytes += static_cast<char>(alphabet.char_to_byte[cp]);
    rest.remove_prefix(len);
  }
  return bytes;
}

void ByteLevelBpe::decode_step(DecodeState& state, token_t id, std::string& out) const {
  const std::size_t i = checked(id);
  if (types_[i] == kTypeControl) return;  // skipped without ending the byte run
  if (types_[i] == kTypeUserDefined) {
    utf8_finish(state.pending, Utf8Repair::maximal_subpart, out);
    out += pieces_[i];
  } else {
    utf8_push(state.pending, token_bytes(id), Utf8Repair::maximal_subpart, out);
  }
  state.at_start = false;
}

void ByteLevelBpe::decode_finish(DecodeState& state, std::string& out) const {
  utf8_finish(state.pending, Utf8Repair::maximal_subpart, out);
}

std::string ByteLevelBpe::summary() const {
  const auto name = [&](token_t id) {
    return id < 0 ? std::string("none")
                  : fmt::format("{} {}", id, pieces_[static_cast<std::size_t>(id)]);
  };
  return fmt::format(
      "byte-level BPE ({}{}), {} tokens, {} merges, ignore_merges {}, bos {}, eos {}, add_bos {}, "
      "add_eos {}",
      pre_name_.empty() ? "no regex" : pre_name_, nfc_ ? ", NFC" : "", pieces_.size(),
      merges_.size(), ignore_merges_, name(bos_), name(eos_), add_bos_, add_eos_);
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes)
    utf8_append(byte_alphabet().byte_to_char[static_cast<unsigned char>(c)], out);
  return out;
}

std::shared_ptr<const Tokenizer> make_byte_level_bpe(const TokenizerSpec& spec) {
  return std::make_shared<ByteLevelBpe>(spec);
}

}  // namespace specdec::detail
