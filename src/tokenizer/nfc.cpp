#include "nfc.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "utf8.hpp"

namespace specdec::detail {
namespace {

struct Decomposition {
  char32_t cp;
  std::uint16_t offset;
  std::uint8_t length;
};
struct CombiningClassRange {
  char32_t first, last;
  std::uint8_t ccc;
};
struct Composition {
  char32_t first, second, composite;
};

#include "unicode_nfc_tables.inc"

// Hangul syllables decompose and compose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

std::uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;  // nothing below U+0300 combines
  const auto it =
      std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                       [](char32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  const CombiningClassRange& r = *std::prev(it);
  return cp <= r.last ? r.ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it != std::end(kDecompositions) && it->cp == cp) {
    out.insert(out.end(), kDecompositionData + it->offset,
               kDecompositionData + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

/// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto it = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), Composition{first, second, 0},
      [](const Composition& a, const Composition& b) {
        return a.first != b.first ? a.first < b.first : a.second < b.second;
      });
  return it != std::end(kCompositions) && it->first == first && it->second == second ? it->composite
                                                                                     : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 no character decomposes, combines or composes with what precedes it.
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0xCC; })) {
    return std::string(text);
  }
  // 1. Full canonical decomposition.
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t len = std::max<std::size_t>(1, utf8_char_len(rest));
    decompose(len == 1 && static_cast<unsigned char>(rest[0]) >= 0x80 ? char32_t{0xFFFD}
                                                                      : utf8_decode(rest, len),
              chars);
    rest.remove_prefix(len);
  }
  // 2. Canonical ordering: each run of non-starters sorted by combining class, stably.
  for (std::size_t i = 0; i < chars.size();) {
    if (combining_class(chars[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < chars.size() && combining_class(chars[end]) != 0) ++end;
    std::stable_sort(chars.begin() + static_cast<std::ptrdiff_t>(i),
                     chars.begin() + static_cast<std::ptrdiff_t>(end), [](char32_t a, char32_t b) {
                       return combining_class(a) < combining_class(b);
                     });
    i = end;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked, i.e. unless a
  // character between them has class 0 or a class >= its own (after ordering, the last one
  // appended has the highest class of those between).
  std::vector<char32_t> out;
  out.reserve(chars.size());
  std::ptrdiff_t starter = -1;
  int last_class = -1;  // class of the last character appended after the starter; -1: none
  for (char32_t c : chars) {
    const int cc = combining_class(c);
    if (starter >= 0 && (last_class == -1 || (last_class != 0 && last_class < cc))) {
      if (const char32_t composite = compose(out[static_cast<std::size_t>(starter)], c)) {
        out[static_cast<std::size_t>(starter)] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last_class = -1;
    } else {
      last_class = cc;
    }
    out.push_back(c);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t c : out) utf8_append(c, result);
  return result;
}

}  // namespace specdec::detail
