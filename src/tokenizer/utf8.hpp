#pragma once
// UTF-8 helpers shared by the tokenizers: well-formedness (Unicode Table 3-7: no overlong forms,
// no surrogates, nothing above U+10FFFF) and repair of invalid bytes by U+FFFD, both for whole
// strings and for a byte stream that arrives in pieces (decoding token by token).

#include <cstddef>
#include <string>
#include <string_view>

namespace specdec::detail {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

/// How invalid UTF-8 becomes U+FFFD. The two references differ:
enum class Utf8Repair {
  per_byte,         ///< one U+FFFD per invalid byte (sentencepiece)
  maximal_subpart,  ///< one U+FFFD per maximal invalid subsequence (Python, Rust, HF tokenizers)
};

/// Length (1-4) of the well-formed character at the start of `s`, or 0 when `s` does not start
/// with one (including a character cut short by the end of `s`).
std::size_t utf8_char_len(std::string_view s) noexcept;

/// Whether `s` is well-formed UTF-8 throughout.
bool utf8_is_valid(std::string_view s) noexcept;

/// Appends `bytes` to `out`, repairing invalid sequences. An unfinished character at the end
/// waits in `pending` (at most 3 bytes) for the next call; utf8_finish() flushes it.
void utf8_push(std::string& pending, std::string_view bytes, Utf8Repair repair, std::string& out);
/// Appends the unfinished character left in `pending` as U+FFFD (per the policy); clears it.
void utf8_finish(std::string& pending, Utf8Repair repair, std::string& out);

/// `s` with invalid sequences replaced; `s` itself when it is already valid.
std::string utf8_repair(std::string_view s, Utf8Repair repair);

/// The code point of the well-formed character of length `len` at the start of `s`.
char32_t utf8_decode(std::string_view s, std::size_t len) noexcept;
/// Appends the UTF-8 encoding of a code point (must be a Unicode scalar value).
void utf8_append(char32_t cp, std::string& out);

}  // namespace specdec::detail
