// libFuzzer target: arbitrary bytes through the GGUF reader and everything built on it (metadata
// display, tokenizer spec, config mapping, weight validation, tokenizer construction, the
// `specdec info` report). Any outcome but a specdec::Error or success is a finding.
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/model/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const specdec::GgufFile g = specdec::parse_gguf(bytes, "fuzz.gguf");
    // The parser promised every tensor lies inside the input: touch both ends under ASan.
    volatile std::byte sink{};
    for (const auto& t : g.tensors)
      if (t.nbytes > 0) sink = t.data[0] ^ t.data[t.nbytes - 1];
    (void)specdec::describe_gguf_metadata(g);
    try {
      (void)specdec::gguf_tokenizer_spec(g);
    } catch (const specdec::Error&) {
    }
    const specdec::LoadedModel m = specdec::load_gguf_model(g);
    (void)specdec::describe_model(m);
  } catch (const specdec::Error&) {
    // Rejecting bad input with a specdec::Error is the expected outcome.
  }
  return 0;
}
