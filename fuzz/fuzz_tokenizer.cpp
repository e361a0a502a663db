// libFuzzer target: arbitrary bytes through the tokenizers. The first byte picks what the rest is:
//
//   0      a SentencePiece tokenizer.model: parse it, and when it parses, build the tokenizer and
//          encode/decode a fixed text with it.
//   1      text: encode with the pair's SentencePiece tokenizer and the Llama-3 / Qwen2 byte-level
//          fixture tokenizers; decode must give the text back (after the documented repair of
//          invalid UTF-8, and NFC for Qwen2) and streaming decode must equal decode.
//   other  token ids (2 bytes each): decode and stream-decode with each tokenizer; they must
//          agree and every streamed chunk must be whole UTF-8.
//
// The tokenizers come from tests/data/tokenizer/ (SPECDEC_FUZZ_TOKENIZER_DATA overrides the
// folder). Any outcome but success or a specdec::Error is a finding; a broken invariant aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../src/tokenizer/nfc.hpp"
#include "../src/tokenizer/utf8.hpp"
#include "specdec/model/tokenizer.hpp"

namespace {

struct Tokenizers {
  std::shared_ptr<const specdec::Tokenizer> spm, llama3, qwen2;
};

const Tokenizers& tokenizers() {
  static const Tokenizers t = [] {
    std::filesystem::path data = SPECDEC_TOKENIZER_DATA;  // the repository's tests/data/tokenizer
    if (const char* env = std::getenv("SPECDEC_FUZZ_TOKENIZER_DATA")) data = env;
    try {
      return Tokenizers{
          specdec::make_tokenizer(
              specdec::read_sentencepiece_model((data / "spm" / "tinyllama-pair.model").string())),
          specdec::make_tokenizer(
              specdec::read_hf_tokenizer_json((data / "llama3-bpe" / "tokenizer.json").string())),
          specdec::make_tokenizer(
              specdec::read_hf_tokenizer_json((data / "qwen2-bpe" / "tokenizer.json").string()))};
    } catch (const specdec::Error& e) {
      std::fprintf(
          stderr,
          "fuzz_tokenizer: cannot load the tokenizers (set SPECDEC_FUZZ_TOKENIZER_DATA): %s\n",
          e.what());
      std::abort();
    }
  }();
  return t;
}

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: invariant broken: %s\n", what);
    std::abort();
  }
}

std::string stream_decode(const specdec::Tokenizer& tok, const std::vector<specdec::token_t>& ids) {
  specdec::IncrementalDetokenizer detok(tok);
  std::string text;
  for (specdec::token_t id : ids) {
    const std::string chunk = detok.push(id);
    require(specdec::detail::utf8_is_valid(chunk), "a streamed chunk is not whole UTF-8");
    text += chunk;
  }
  text += detok.flush();
  return text;
}

void check_ids(const specdec::Tokenizer& tok, const std::vector<specdec::token_t>& ids) {
  const std::string text = tok.decode(ids);
  require(specdec::detail::utf8_is_valid(text), "decode() returned invalid UTF-8");
  require(stream_decode(tok, ids) == text, "streaming decode differs from decode()");
}

/// What byte-level decode(encode(text)) gives: `text` without the special (control) tokens
/// written in it (matched leftmost first; the fixture tokenizers' special tokens are not prefixes
/// of one another nor of other added tokens), the text between them NFC-normalized when `nfc`.
std::string expected_bpe_round_trip(const specdec::Tokenizer& tok, const std::string& text,
                                    bool nfc) {
  static std::map<const specdec::Tokenizer*, std::vector<std::string>> specials_of;
  auto& specials = specials_of[&tok];
  if (specials.empty()) {
    for (std::size_t id = 0; id < tok.vocab_size(); ++id) {
      const auto token = static_cast<specdec::token_t>(id);
      if (tok.token_bytes(token).empty() && !tok.token_piece(token).empty())
        specials.emplace_back(tok.token_piece(token));
    }
  }
  std::string out, segment;
  const auto flush = [&] {
    out += nfc ? specdec::detail::nfc(segment) : segment;
    segment.clear();
  };
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t matched = 0;
    for (const auto& s : specials) {
      if (text[pos] == s[0] && text.compare(pos, s.size(), s) == 0)
        matched = std::max(matched, s.size());
    }
    if (matched > 0) {
      flush();
      pos += matched;
    } else {
      segment += text[pos++];
    }
  }
  flush();
  return out;
}

void check_text(const std::string& text) {
  using specdec::detail::Utf8Repair;
  const Tokenizers& t = tokenizers();
  // SentencePiece (identity normalization, dummy prefix, byte fallback) gives the text back with
  // invalid bytes as U+FFFD each and "▁" (U+2581) read as a space.
  std::string expected = specdec::detail::utf8_repair(text, Utf8Repair::per_byte);
  for (std::size_t pos; (pos = expected.find("\xE2\x96\x81")) != std::string::npos;)
    expected.replace(pos, 3, " ");
  const auto spm_ids = t.spm->encode(text, true);
  check_ids(*t.spm, spm_ids);
  require(t.spm->decode(spm_ids) == expected, "SentencePiece decode(encode(s)) != s");
  // Byte-level BPE is lossless on valid text up to NFC; invalid bytes become U+FFFD per maximal
  // subpart, and special tokens written in the text are recognised, then skipped by decode().
  const std::string repaired = specdec::detail::utf8_repair(text, Utf8Repair::maximal_subpart);
  for (const auto* tok : {t.llama3.get(), t.qwen2.get()}) {
    const auto ids = tok->encode(text, true);
    check_ids(*tok, ids);
    const bool nfc = tok == t.qwen2.get();  // the Qwen2 fixture normalizes to NFC, as Qwen2 does
    require(tok->decode(ids) == expected_bpe_round_trip(*tok, repaired, nfc),
            "byte-level decode(encode(s)) != s");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] == 0) {
      const auto tok =
          specdec::make_tokenizer(specdec::parse_sentencepiece_model(rest, "fuzz.model"));
      check_ids(*tok,
                tok->encode("Hello, world!\n\tdef f(x):  return x  # \xE2\x82\xAC \xFF", true));
    } else if (data[0] == 1) {
      check_text(rest);
    } else {
      const Tokenizers& t = tokenizers();
      for (const auto* tok : {t.spm.get(), t.llama3.get(), t.qwen2.get()}) {
        std::vector<specdec::token_t> ids;
        for (std::size_t i = 0; i + 1 < rest.size(); i += 2) {
          const auto raw = static_cast<std::size_t>(static_cast<std::uint8_t>(rest[i]) << 8 |
                                                    static_cast<std::uint8_t>(rest[i + 1]));
          ids.push_back(static_cast<specdec::token_t>(raw % tok->vocab_size()));
        }
        check_ids(*tok, ids);
      }
    }
  } catch (const specdec::Error&) {
    // Rejecting bad input with a specdec::Error is the expected outcome.
  }
  return 0;
}
