#include "pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "specdec/common.hpp"
#include "utf8.hpp"

namespace specdec::detail {
namespace {

// The Split regexes of the tokenizer.json files of Llama 3 and Qwen2, and GPT-2's ByteLevel
// regex, verbatim (Oniguruma dialect).
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0)
    return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string pretokenizer_regex(std::string_view pre) {
  // Names as llama.cpp's converter writes them into tokenizer.ggml.pre.
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return std::string(kLlama3Regex);
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return std::string(kQwen2Regex);
  if (pre == "gpt2" || pre == "gpt-2") return std::string(kGpt2Regex);
  throw Error(fmt::format(
      "byte-level pre-tokenizer '{}' is not supported (supported: llama-bpe, qwen2, gpt2)", pre));
}

std::string oniguruma_to_pcre2(std::string_view p) {
  // Unicode White_Space, the members of Oniguruma's \s: tab..carriage return, U+0085, and the
  // Zs/Zl/Zp separators. PCRE2's own \s differs (no U+0085; U+180E in some versions).
  constexpr std::string_view kSpaceInClass =
      R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  bool class_start = false;  // just after "[" or "[^": a "]" here is a literal
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'Q') {  // \Q...\E is literal text: copy it untouched
        const std::size_t end = p.find("\\E", i + 2);
        const std::size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out += p.substr(i, stop - i);
        i = stop - 1;
        class_start = false;
        continue;
      }
      if (e == 's') {
        out += in_class ? std::string(kSpaceInClass) : fmt::format("[{}]", kSpaceInClass);
      } else if (e == 'S') {
        if (in_class)
          throw Error(fmt::format("regex '{}': \\S inside a character class is not supported", p));
        out += fmt::format("[^{}]", kSpaceInClass);
      } else {
        out += c;
        out += e;
      }
      ++i;
      class_start = false;
      continue;
    }
    if (in_class) {
      if (c == ']' && !class_start) in_class = false;
      class_start = false;
      out += c;
      continue;
    }
    out += c;
    if (c == '[') {
      in_class = class_start = true;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
    }
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns, const std::string& source)
    : source_(source) {
  for (const std::string& pattern : patterns) {
    const std::string translated = oniguruma_to_pcre2(pattern);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                      PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      throw Error(fmt::format("{}: pre-tokenizer regex '{}': {} at offset {}", source_, pattern,
                              pcre2_message(error), error_offset));
    }
    // JIT makes matching several times faster; without it (unsupported CPU) the interpreter runs.
    (void)pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(compiled));
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  for (const auto& regex : regexes_) {
    // Match data per call: the compiled pattern is shared between threads, match data is not.
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
    if (!match) throw std::bad_alloc();
    next.clear();
    for (std::string_view piece : current) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      std::size_t offset = 0, gap_begin = 0;
      while (offset <= piece.size()) {
        int rc = pcre2_match(regex->code, subject, piece.size(), offset, PCRE2_NO_UTF_CHECK,
                             match.get(), nullptr);
        if (rc ==
            PCRE2_ERROR_JIT_STACKLIMIT) {  // fall back to the interpreter, which uses the heap
          rc = pcre2_match(regex->code, subject, piece.size(), offset,
                           PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match.get(), nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0)
          throw Error(fmt::format("{}: pre-tokenizer regex: {}", source_, pcre2_message(rc)));
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const std::size_t begin = ovector[0], end = ovector[1];
        // Like Hugging Face's Split: the text before a match is a piece, so is the match unless
        // it is empty (an empty match still ends the piece before it).
        if (begin > gap_begin) next.push_back(piece.substr(gap_begin, begin - gap_begin));
        gap_begin = end;
        if (end > begin) {
          next.push_back(piece.substr(begin, end - begin));
          offset = end;
        } else {  // search again one character further
          if (begin >= piece.size()) break;
          const std::size_t len = utf8_char_len(piece.substr(begin));
          offset = begin + (len == 0 ? 1 : len);
        }
      }
      if (gap_begin < piece.size()) next.push_back(piece.substr(gap_begin));
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace specdec::detail
