#include "utf8.hpp"

#include <cstdint>

namespace specdec::detail {
namespace {

// The byte ranges of Unicode Table 3-7 ("Well-Formed UTF-8 Byte Sequences"): the lead byte
// fixes the length and the range of the second byte; later bytes are always 80..BF.
struct LeadInfo {
  std::uint8_t length;  // 0: not a lead byte
  std::uint8_t second_lo, second_hi;
};

LeadInfo lead_info(std::uint8_t b) noexcept {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlong forms
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlong forms
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

bool fits(std::uint8_t b, std::size_t index, const LeadInfo& lead) noexcept {
  if (index == 1) return b >= lead.second_lo && b <= lead.second_hi;
  return b >= 0x80 && b <= 0xBF;
}

enum class Prefix { complete, incomplete, invalid };

// Classifies a non-empty byte string of at most 4 bytes as a whole character, the beginning of
// one, or neither.
Prefix classify(std::string_view s) noexcept {
  const LeadInfo lead = lead_info(static_cast<std::uint8_t>(s[0]));
  if (lead.length == 0 || s.size() > lead.length) return Prefix::invalid;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (!fits(static_cast<std::uint8_t>(s[i]), i, lead)) return Prefix::invalid;
  }
  return s.size() == lead.length ? Prefix::complete : Prefix::incomplete;
}

void push_byte(std::string& pending, char byte, Utf8Repair repair, std::string& out) {
  if (pending.empty() && static_cast<std::uint8_t>(byte) < 0x80) {
    out += byte;
    return;
  }
  pending += byte;
  switch (classify(pending)) {
    case Prefix::complete:
      out += pending;
      pending.clear();
      return;
    case Prefix::incomplete:
      return;
    case Prefix::invalid:
      break;
  }
  // `pending` without its last byte was empty or a viable prefix; with it, it is not.
  out += kReplacementChar;
  if (pending.size() == 1) {
    pending.clear();
    return;
  }
  std::string rest;
  if (repair == Utf8Repair::per_byte) {
    rest = pending.substr(1);  // only the first byte is replaced; rescan the others
  } else {
    rest = pending.substr(pending.size() - 1);  // the viable prefix was the maximal subpart
  }
  pending.clear();
  for (char c : rest) push_byte(pending, c, repair, out);
}

}  // namespace

std::size_t utf8_char_len(std::string_view s) noexcept {
  if (s.empty()) return 0;
  const LeadInfo lead = lead_info(static_cast<std::uint8_t>(s[0]));
  if (lead.length == 0 || s.size() < lead.length) return 0;
  for (std::size_t i = 1; i < lead.length; ++i) {
    if (!fits(static_cast<std::uint8_t>(s[i]), i, lead)) return 0;
  }
  return lead.length;
}

bool utf8_is_valid(std::string_view s) noexcept {
  while (!s.empty()) {
    const std::size_t n = utf8_char_len(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

void utf8_push(std::string& pending, std::string_view bytes, Utf8Repair repair, std::string& out) {
  for (char c : bytes) push_byte(pending, c, repair, out);
}

void utf8_finish(std::string& pending, Utf8Repair repair, std::string& out) {
  if (pending.empty()) return;
  const std::size_t count = repair == Utf8Repair::per_byte ? pending.size() : 1;
  for (std::size_t i = 0; i < count; ++i) out += kReplacementChar;
  pending.clear();
}

std::string utf8_repair(std::string_view s, Utf8Repair repair) {
  if (utf8_is_valid(s)) return std::string(s);
  std::string out, pending;
  out.reserve(s.size() + 16);
  utf8_push(pending, s, repair, out);
  utf8_finish(pending, repair, out);
  return out;
}

char32_t utf8_decode(std::string_view s, std::size_t len) noexcept {
  const auto b = [&](std::size_t i) {
    return static_cast<char32_t>(static_cast<std::uint8_t>(s[i]));
  };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default:
      return 0xFFFD;
  }
}

void utf8_append(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace specdec::detail
