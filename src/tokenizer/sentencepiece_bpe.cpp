// SentencePiece BPE (Llama 2, Mistral, TinyLlama), reproducing the `sentencepiece` library:
//
//   normalize   identity rules only: each invalid UTF-8 byte becomes U+FFFD, spaces become
//               "▁" (U+2581), "▁" is prepended (add_dummy_prefix); optionally leading/trailing
//               spaces are dropped and runs of spaces collapsed (remove_extra_whitespaces).
//   split       into characters; a user-defined piece is matched whole and never merged.
//   merge       repeatedly merge the adjacent pair whose concatenation is the vocabulary piece with
//               the highest score (ties: leftmost), with a priority queue: O(n log n); done per
//               independent segment of the text (see append_piece_ids), which gives the same
//               result.
//   resegment   a final piece of type "unused" is split back into the two pieces it came from.
//   unknown     a piece outside the vocabulary becomes its UTF-8 bytes as <0xXX> tokens (byte
//               fallback) or <unk> (consecutive <unk> pieces collapse into one).
//
// Decoding follows sentencepiece's Decode: control tokens vanish, <unk> is " ⁇ ", "▁" is a space,
// runs of byte tokens are reassembled into UTF-8 with one U+FFFD per invalid byte (a non-byte token
// ends a run), and the first piece loses the space that the dummy prefix added.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_set>
#include <vector>

#include "internal.hpp"
#include "utf8.hpp"

namespace specdec::detail {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // "▁" U+2581

// Bytes of the character that starts at s[0], from the lead byte alone (sentencepiece's
// OneCharLen); the normalized text is valid UTF-8, so this is exact there.
std::size_t one_char_len(std::string_view s) noexcept {
  static constexpr std::array<std::size_t, 16> kLen = {1, 1, 1, 1, 1, 1, 1, 1,
                                                       1, 1, 1, 1, 2, 2, 3, 4};
  return std::min(s.size(), kLen[static_cast<unsigned char>(s[0]) >> 4]);
}

class SentencePieceBpe final : public Tokenizer {
 public:
  explicit SentencePieceBpe(const TokenizerSpec& spec);

  [[nodiscard]] std::vector<token_t> encode(std::string_view text, bool add_special) const override;
  [[nodiscard]] std::vector<token_t> encode_special(std::string_view text,
                                                    bool add_special) const override;
  [[nodiscard]] std::string token_bytes(token_t id) const override;
  [[nodiscard]] bool is_control(token_t id) const override {
    return types_[checked(id)] == kTypeControl;
  }
  [[nodiscard]] std::string_view token_piece(token_t id) const override {
    return pieces_.at(checked(id));
  }
  void decode_step(DecodeState& state, token_t id, std::string& out) const override;
  void decode_finish(DecodeState& state, std::string& out) const override;
  /// With byte fallback and spaces kept, every token spells what it stands for ("▁" is three
  /// bytes for one space, <0xXX> six for one byte): the longest piece bounds a token's bytes.
  /// Collapsed runs of spaces (remove_extra_whitespaces) or of unknown characters (<unk>, without
  /// byte fallback) have no bound.
  [[nodiscard]] std::optional<std::size_t> max_bytes_per_token() const override {
    if (remove_extra_whitespaces_ || !byte_fallback_) return std::nullopt;
    return longest_piece_;
  }
  [[nodiscard]] std::size_t vocab_size() const override { return pieces_.size(); }
  [[nodiscard]] token_t bos() const override { return bos_; }
  [[nodiscard]] token_t eos() const override { return eos_; }
  [[nodiscard]] std::string summary() const override;

 private:
  [[nodiscard]] std::size_t checked(token_t id) const;
  [[nodiscard]] std::string normalize(std::string_view text) const;
  [[nodiscard]] token_t piece_to_id(std::string_view piece) const;
  void append_piece_ids(std::string_view normalized, std::vector<token_t>& out) const;

  /// Two adjacent characters (up to 4 bytes each) packed into one key.
  static std::uint64_t bigram_key(std::string_view a, std::string_view b) noexcept {
    const auto pack = [](std::string_view c) {
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < c.size() && i < 4; ++i)
        v = v << 8 | static_cast<unsigned char>(c[i]);
      return v;
    };
    return static_cast<std::uint64_t>(pack(a)) << 32 | pack(b);
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::int32_t> types_;
  StringMap<token_t> mergeable_;  // normal, user-defined and unused pieces: what merging may form
  StringMap<token_t> reserved_;   // control, unknown and byte pieces: found only by exact lookup
  PrefixTrie user_defined_;
  PrefixTrie special_;  // control and unknown pieces: what encode_special() cuts out of a text
  std::unordered_set<std::uint64_t>
      inner_bigrams_;  // adjacent character pairs inside mergeable pieces
  bool has_unused_ = false;
  std::array<token_t, 256> byte_ids_{};
  bool byte_fallback_ = false;
  bool add_dummy_prefix_ = true;
  bool remove_extra_whitespaces_ = false;
  std::size_t longest_piece_ = 1;  // bytes of the longest piece
  std::string unk_surface_;
  token_t unk_ = -1, bos_ = -1, eos_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::string source_;
};

SentencePieceBpe::SentencePieceBpe(const TokenizerSpec& spec)
    : pieces_(spec.tokens),
      add_dummy_prefix_(spec.add_space_prefix),
      remove_extra_whitespaces_(spec.remove_extra_whitespaces),
      unk_surface_(spec.unk_surface),
      add_bos_(spec.add_bos),
      add_eos_(spec.add_eos),
      source_(spec.source) {
  const std::size_t n = pieces_.size();
  if (n == 0) spec_error(spec, "the SentencePiece vocabulary is empty");
  if (n > static_cast<std::size_t>(INT32_MAX))
    spec_error(spec, "the vocabulary has more than 2^31 tokens");
  if (spec.scores.size() != n) {
    spec_error(spec, fmt::format("{} scores for {} tokens (SentencePiece BPE merges by score)",
                                 spec.scores.size(), n));
  }
  scores_ = spec.scores;
  if (spec.token_types.empty()) {
    types_.assign(n, kTypeNormal);  // files without types: mark the declared specials
    for (token_t id : {spec.bos, spec.eos, spec.pad}) {
      if (id >= 0 && static_cast<std::size_t>(id) < n)
        types_[static_cast<std::size_t>(id)] = kTypeControl;
    }
    if (spec.unk >= 0 && static_cast<std::size_t>(spec.unk) < n)
      types_[static_cast<std::size_t>(spec.unk)] = kTypeUnknown;
  } else if (spec.token_types.size() != n) {
    spec_error(spec, fmt::format("{} token types for {} tokens", spec.token_types.size(), n));
  } else {
    types_ = spec.token_types;
  }

  byte_ids_.fill(-1);
  int byte_pieces = 0;
  for (const std::string& piece : pieces_) longest_piece_ = std::max(longest_piece_, piece.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& piece = pieces_[i];
    const auto id = static_cast<token_t>(i);
    if (piece.empty()) spec_error(spec, fmt::format("token {} is an empty string", i));
    switch (types_[i]) {
      case kTypeNormal:
      case kTypeUserDefined:
      case kTypeUnused:
        mergeable_.emplace(piece, id);  // the first of duplicate pieces wins
        if (types_[i] == kTypeUserDefined) user_defined_.insert(piece, id);
        break;
      case kTypeUnknown:
        if (unk_ < 0) unk_ = id;
        reserved_.emplace(piece, id);
        special_.insert(piece, id);
        break;
      case kTypeControl:
        reserved_.emplace(piece, id);
        special_.insert(piece, id);
        break;
      case kTypeByte: {
        const int value = byte_piece_value(piece);
        if (value < 0) spec_error(spec, fmt::format("byte token {} is '{}', not <0xXX>", i, piece));
        if (byte_ids_[static_cast<std::size_t>(value)] < 0) {
          byte_ids_[static_cast<std::size_t>(value)] = id;
          ++byte_pieces;
        }
        reserved_.emplace(piece, id);
        break;
      }
      default:
        spec_error(spec, fmt::format("token {} has type {}, not one of 1-6", i, types_[i]));
    }
  }
  if (unk_ < 0) spec_error(spec, "the SentencePiece vocabulary has no unknown-type token (<unk>)");
  for (const auto& [piece, id] : mergeable_) {
    if (types_[static_cast<std::size_t>(id)] == kTypeUnused) has_unused_ = true;
    std::string_view rest = piece, prev;
    while (!rest.empty()) {  // characters split as encode() splits the text
      const std::string_view ch = rest.substr(0, one_char_len(rest));
      if (!prev.empty()) inner_bigrams_.insert(bigram_key(prev, ch));
      prev = ch;
      rest.remove_prefix(ch.size());
    }
  }
  if (spec.byte_fallback && byte_pieces > 0 && byte_pieces < 256) {
    spec_error(spec,
               fmt::format("byte fallback needs all 256 <0xXX> tokens, found {}", byte_pieces));
  }
  byte_fallback_ = spec.byte_fallback && byte_pieces == 256;

  // BOS/EOS exist only as control tokens (sentencepiece's bos_id()/eos_id() rule).
  const auto control_or_none = [&](token_t id) {
    return id >= 0 && static_cast<std::size_t>(id) < n &&
                   types_[static_cast<std::size_t>(id)] == kTypeControl
               ? id
               : -1;
  };
  bos_ = control_or_none(spec.bos);
  eos_ = control_or_none(spec.eos);
  if (add_bos_ && bos_ < 0) spec_error(spec, "add_bos is set but there is no BOS control token");
  if (add_eos_ && eos_ < 0) spec_error(spec, "add_eos is set but there is no EOS control token");
}

std::size_t SentencePieceBpe::checked(token_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= pieces_.size()) {
    throw Error(fmt::format("{}: token id {} is outside the vocabulary [0, {})",
                            source_.empty() ? "tokenizer" : source_, id, pieces_.size()));
  }
  return static_cast<std::size_t>(id);
}

std::string SentencePieceBpe::normalize(std::string_view input) const {
  std::string out;
  if (input.empty()) return out;
  if (remove_extra_whitespaces_) {
    while (!input.empty() && input.front() == ' ') input.remove_prefix(1);
    if (input.empty()) return out;
  }
  out.reserve(input.size() * 3 / 2 + kSpaceSymbol.size());
  if (add_dummy_prefix_) out += kSpaceSymbol;

  bool prev_space = remove_extra_whitespaces_;
  while (!input.empty()) {
    // One unit of input: a user-defined piece whole, one valid character, or one invalid byte
    // (which becomes U+FFFD).
    std::size_t consumed = 0;
    if (!user_defined_.empty()) consumed = user_defined_.longest_prefix(input, nullptr);
    if (consumed == 0) consumed = utf8_char_len(input);
    std::string_view unit = consumed > 0 ? input.substr(0, consumed) : kReplacementChar;
    if (consumed == 0) consumed = 1;
    while (prev_space && !unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    if (!unit.empty()) {
      for (char c : unit) {
        if (c == ' ') {
          out += kSpaceSymbol;
        } else {
          out += c;
        }
      }
      prev_space = unit.back() == ' ';
    }
    input.remove_prefix(consumed);
    if (!remove_extra_whitespaces_) prev_space = false;
  }
  if (remove_extra_whitespaces_) {
    while (out.size() >= kSpaceSymbol.size() && out.ends_with(kSpaceSymbol))
      out.resize(out.size() - kSpaceSymbol.size());
  }
  return out;
}

token_t SentencePieceBpe::piece_to_id(std::string_view piece) const {
  if (auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
  if (auto it = mergeable_.find(piece); it != mergeable_.end()) return it->second;
  return unk_;
}

void SentencePieceBpe::append_piece_ids(std::string_view text, std::vector<token_t>& out) const {
  // Symbols form a doubly linked list over `text`; a merge grows the left symbol and empties the
  // right one. Offsets are 32-bit: encode() refuses texts of 2^32 bytes or more.
  struct Symbol {
    std::int32_t prev, next;
    std::uint32_t begin, size;
    bool frozen;  // user-defined piece: never merged
  };
  struct Candidate {
    float score;
    std::int32_t left, right;
    std::uint32_t size;  // bytes of the merged piece; a stale candidate no longer adds up to it
  };
  // Highest score first; equal scores: leftmost first (sentencepiece's SymbolPairComparator).
  const auto lower_priority = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower_priority)> agenda(
      lower_priority);

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t len =
        user_defined_.empty() ? 0 : user_defined_.longest_prefix(text.substr(pos), nullptr);
    const bool frozen = len > 0;
    if (!frozen) len = one_char_len(text.substr(pos));
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({index - 1, pos + len < text.size() ? index + 1 : -1,
                       static_cast<std::uint32_t>(pos), static_cast<std::uint32_t>(len), frozen});
    pos += len;
  }
  if (symbols.empty()) return;

  // Reverse merges of "unused" pieces (key: the merged piece; value: the two it was made of),
  // to split them back at the end. Like sentencepiece, the last recorded split wins.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;

  const auto piece_of = [&](const Symbol& s) { return text.substr(s.begin, s.size); };
  const auto maybe_add = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    const Symbol& r = symbols[static_cast<std::size_t>(right)];
    if (l.frozen || r.frozen) return;
    const std::string_view merged = text.substr(l.begin, l.size + r.size);
    const auto it = mergeable_.find(merged);
    if (it == mergeable_.end()) return;
    const auto id = static_cast<std::size_t>(it->second);
    agenda.push({scores_[id], left, right, l.size + r.size});
    if (types_[id] == kTypeUnused) rev_merge[merged] = {piece_of(l), piece_of(r)};
  };

  const auto merge_all = [&] {
    while (!agenda.empty()) {
      const Candidate top = agenda.top();
      agenda.pop();
      Symbol& l = symbols[static_cast<std::size_t>(top.left)];
      Symbol& r = symbols[static_cast<std::size_t>(top.right)];
      if (l.size == 0 || r.size == 0 || l.size + r.size != top.size) continue;  // stale
      l.size += r.size;
      l.next = r.next;
      if (r.next >= 0) symbols[static_cast<std::size_t>(r.next)].prev = top.left;
      r.size = 0;
      maybe_add(l.prev, top.left);
      maybe_add(top.left, l.next);
    }
  };
  // Where no vocabulary piece contains the two characters on either side of a position, no merge
  // can ever cross it: the text falls into independent segments (roughly words), and merging
  // each to completion on its own gives the same pieces as sentencepiece's one global queue (the
  // order within a segment is the same) with a small, cache-resident queue. Not with unused
  // pieces: their reverse-merge record is "last pushed wins", which depends on the global order.
  std::size_t segment_begin = 0;
  for (std::size_t i = 1; i <= symbols.size(); ++i) {
    const bool boundary = i == symbols.size() ||
                          (!has_unused_ && !inner_bigrams_.contains(bigram_key(
                                               piece_of(symbols[i - 1]), piece_of(symbols[i]))));
    if (!boundary) continue;
    for (std::size_t j = segment_begin + 1; j < i; ++j) {
      maybe_add(static_cast<std::int32_t>(j - 1), static_cast<std::int32_t>(j));
    }
    merge_all();
    segment_begin = i;
  }

  // Resegment unused pieces (explicit stack instead of sentencepiece's recursion), then map
  // pieces to ids with byte fallback or <unk>.
  bool prev_unk = false;
  std::vector<std::string_view> stack;
  for (std::int32_t index = 0; index >= 0; index = symbols[static_cast<std::size_t>(index)].next) {
    stack.push_back(piece_of(symbols[static_cast<std::size_t>(index)]));
    while (!stack.empty()) {
      const std::string_view piece = stack.back();
      stack.pop_back();
      const token_t id = piece_to_id(piece);
      if (types_[static_cast<std::size_t>(id)] == kTypeUnused) {
        if (auto it = rev_merge.find(piece); it != rev_merge.end()) {
          stack.push_back(it->second.second);
          stack.push_back(it->second.first);
          continue;
        }
      }
      const bool is_unk = types_[static_cast<std::size_t>(id)] == kTypeUnknown;
      if (is_unk && byte_fallback_) {
        for (char c : piece) out.push_back(byte_ids_[static_cast<unsigned char>(c)]);
      } else if (!(is_unk && prev_unk)) {  // a run of unknown pieces is a single <unk>
        out.push_back(id);
      }
      prev_unk = is_unk;
    }
  }
}

std::vector<token_t> SentencePieceBpe::encode(std::string_view text, bool add_special) const {
  if (text.size() >= UINT32_MAX / 4) {
    throw Error(fmt::format("{}: text of {} bytes is too long to tokenize",
                            source_.empty() ? "tokenizer" : source_, text.size()));
  }
  std::vector<token_t> ids;
  if (add_special && add_bos_) ids.push_back(bos_);
  append_piece_ids(normalize(text), ids);
  if (add_special && add_eos_) ids.push_back(eos_);
  return ids;
}

std::vector<token_t> SentencePieceBpe::encode_special(std::string_view text,
                                                      bool add_special) const {
  // llama.cpp's SentencePiece tokenization with parse_special: the special pieces are cut out of
  // the text (here leftmost-longest), each stretch of text between them is tokenized on its own
  // (so it gets the dummy-prefix space: llama.cpp prefixes a space after every special token).
  std::vector<token_t> ids;
  if (add_special && add_bos_) ids.push_back(bos_);
  std::size_t start = 0;  // of the text not yet tokenized
  const auto flush_text = [&](std::size_t end) {
    if (end > start) {
      const std::vector<token_t> part = encode(text.substr(start, end - start), false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  for (std::size_t pos = 0; pos < text.size();) {
    token_t id = -1;
    const std::size_t len = special_.longest_prefix(text.substr(pos), &id);
    if (len == 0) {
      ++pos;
      continue;
    }
    flush_text(pos);
    ids.push_back(id);
    pos += len;
    start = pos;
  }
  flush_text(text.size());
  if (add_special && add_eos_) ids.push_back(eos_);
  return ids;
}

std::string SentencePieceBpe::token_bytes(token_t id) const {
  const std::size_t i = checked(id);
  switch (types_[i]) {
    case kTypeControl:
      return {};
    case kTypeUnknown:
      return unk_surface_;
    case kTypeByte:
      return std::string(1, static_cast<char>(byte_piece_value(pieces_[i])));
    default:
      break;
  }
  std::string out;
  std::string_view piece = pieces_[i];
  for (std::size_t pos; (pos = piece.find(kSpaceSymbol)) != std::string_view::npos;) {
    out += piece.substr(0, pos);
    out += ' ';
    piece.remove_prefix(pos + kSpaceSymbol.size());
  }
  out += piece;
  return out;
}

void SentencePieceBpe::decode_step(DecodeState& state, token_t id, std::string& out) const {
  const std::size_t i = checked(id);
  const std::size_t before = out.size();
  if (types_[i] == kTypeByte) {
    utf8_push(state.pending, token_bytes(id), Utf8Repair::per_byte, out);
  } else {
    utf8_finish(state.pending, Utf8Repair::per_byte, out);  // a non-byte piece ends a byte run
    if (out.size() > before) state.at_start = false;
    if (types_[i] == kTypeUnknown) {
      out += unk_surface_;
    } else if (types_[i] != kTypeControl) {
      std::string text = token_bytes(id);
      // The dummy prefix's space: sentencepiece drops the "▁" the first piece starts with (with
      // remove_extra_whitespaces, of every piece until text appears).
      if (state.at_start && (add_dummy_prefix_ || remove_extra_whitespaces_) && !text.empty() &&
          text[0] == ' ' && pieces_[i].starts_with(kSpaceSymbol)) {
        text.erase(0, 1);
        if (!remove_extra_whitespaces_) state.at_start = false;
      }
      out += text;
    }
  }
  if (out.size() > before) state.at_start = false;
}

void SentencePieceBpe::decode_finish(DecodeState& state, std::string& out) const {
  const std::size_t before = out.size();
  utf8_finish(state.pending, Utf8Repair::per_byte, out);
  if (out.size() > before) state.at_start = false;
}

std::string SentencePieceBpe::summary() const {
  const auto name = [&](token_t id) {
    return id < 0 ? std::string("none")
                  : fmt::format("{} {}", id, pieces_[static_cast<std::size_t>(id)]);
  };
  return fmt::format(
      "SentencePiece BPE, {} tokens, byte fallback {}, bos {}, eos {}, unk {}, add_bos {}, add_eos "
      "{}, "
      "dummy prefix {}",
      pieces_.size(), byte_fallback_ ? "on" : "off", name(bos_), name(eos_), name(unk_), add_bos_,
      add_eos_, add_dummy_prefix_);
}

}  // namespace

std::shared_ptr<const Tokenizer> make_sentencepiece_bpe(const TokenizerSpec& spec) {
  return std::make_shared<SentencePieceBpe>(spec);
}

}  // namespace specdec::detail
