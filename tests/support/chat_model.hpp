#pragma once
// The chat tests' fixture model: a copy of a bundled demo model (models/*-q8_0.gguf, Llama with a
// 4096-token SentencePiece vocabulary and no chat template) made into a ChatML chat model through
// the GGUF writer, so that chat runs in CI without the real Qwen files:
//
//   tokenizer.chat_template   OpenHermes-2.5's ChatML template (plain ChatML)
//   <|im_start|>              control token, in place of the last piece of the vocabulary
//   <|im_end|>                control token with the id of the newline byte <0x0A>, whose piece
//                             moves to the second-to-last id
//
// The weights are untouched. Giving <|im_end|> the newline's id makes the model end its turn
// where it would have started a new line (the pair was trained on lines of text), so answers end
// at an end-of-turn token that is not the tokenizer's EOS (</s>), as with a real chat model whose
// EOS differs from its end-of-turn token. The two pieces that lose their ids are rare characters
// (their text falls back to bytes).

#include <cstdint>
#include <string>

#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"

namespace specdec::test {

inline constexpr const char* kChatmlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

/// Writes the ChatML copy of `source` (a demo model) to `path`.
inline void write_chatml_model(const std::string& source, const std::string& path) {
  const GgufFile g = read_gguf(source);
  GgufWriter writer(g.alignment);
  for (auto [key, value] : g.metadata) {
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type") {
      auto& items = std::get<GgufValue::Array>(value.value);
      const std::size_t n = items.size();
      const std::size_t newline = 13, moved = n - 2, start = n - 1;
      if (key == "tokenizer.ggml.tokens") {
        if (*items[newline].as_string() != "<0x0A>")
          throw Error(source + ": token 13 is not <0x0A>");
        items[newline].value = std::string("<|im_end|>");
        items[moved].value = std::string("<0x0A>");
        items[start].value = std::string("<|im_start|>");
      } else {
        items[newline].value = std::int64_t{3};  // control
        items[moved].value = std::int64_t{6};    // byte
        items[start].value = std::int64_t{3};
      }
    }
    writer.set(key, std::move(value));
  }
  writer.set("tokenizer.chat_template", GgufWriter::str(kChatmlTemplate));
  for (const GgufTensorInfo& t : g.tensors) {
    std::vector<std::byte> data(t.data, t.data + t.nbytes);
    writer.add_tensor(t.name, *t.dtype, t.shape, std::move(data));
  }
  writer.write(path);
}

}  // namespace specdec::test
