#pragma once
// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), the normalizer of Qwen2's tokenizer.json. Tables generated from
// Python's unicodedata by tools/make_unicode_tables.py.

#include <string>
#include <string_view>

namespace specdec::detail {

/// NFC of valid UTF-8 text. ASCII (and any text NFC leaves alone) comes back unchanged.
std::string nfc(std::string_view text);

}  // namespace specdec::detail
