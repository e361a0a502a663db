#pragma once
// The regex pre-tokenizer of byte-level BPE: the text is cut by a sequence of regexes, each
// applied to every piece the previous one produced, keeping both the matches and the text between
// them as pieces (Hugging Face's Split with behavior "Isolated"). PCRE2 in UTF + UCP mode runs
// the patterns; they are written in the Oniguruma dialect that Hugging Face `tokenizers` uses,
// and the one difference that matters for these patterns is translated (see
// oniguruma_to_pcre2()).

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::detail {

/// The Split regex of a llama.cpp pre-tokenizer name: "llama-bpe" (Llama 3), "qwen2", "gpt2".
/// Throws specdec::Error for other names.
std::string pretokenizer_regex(std::string_view pre);

/// Oniguruma's \s is Unicode White_Space (with U+0085 NEXT LINE, without U+180E); PCRE2's is
/// not quite, so \s and \S are rewritten into explicit classes of White_Space. Throws
/// specdec::Error for \S inside a class.
std::string oniguruma_to_pcre2(std::string_view pattern);

class RegexSplitter {
 public:
  /// Compiles the patterns (Oniguruma dialect); `source` labels errors.
  RegexSplitter(const std::vector<std::string>& patterns, const std::string& source);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  /// Appends the pieces of `text` (valid UTF-8) to `out`: views into `text`, in order, covering
  /// it. With no patterns the whole text is one piece.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
  std::string source_;
};

}  // namespace specdec::detail
