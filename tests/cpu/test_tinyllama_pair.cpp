// The trained pair (../shared/models/tinyllama-pair) reproduces the greedy continuations of its
// README's PyTorch reference (greedy-reference.jsonl), token for token, through both file layouts
// (GGUF with adjacent-pair rotary rows, Hugging Face safetensors with rotate_half rows):
//  - decoding one token at a time with the KV cache;
//  - teacher-forced: prompt ++ expected continuation in one forward call, whose argmax at every
//    position must be the next expected token (equivalent to the above given batch invariance,
//    which the invariant tests check bitwise).
// All 40 prompts both ways; under the sanitizers, whose instrumented kernels are ~10x slower, the
// first 4 prompts decoded and every 4th teacher-forced (the full check is the release build's).
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

namespace {

using specdec::token_t;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::size_t decoded_prompts = 4, forced_stride = 4;
#else
constexpr std::size_t decoded_prompts = 40, forced_stride = 1;
#endif

struct Reference {
  std::vector<token_t> prompt, target, draft;
};

std::vector<Reference> read_reference(const std::filesystem::path& pair) {
  std::ifstream in(pair / "greedy-reference.jsonl");
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    refs.push_back({j.at("prompt_ids").get<std::vector<token_t>>(),
                    j.at("target_greedy").get<std::vector<token_t>>(),
                    j.at("draft_greedy").get<std::vector<token_t>>()});
  }
  return refs;
}

token_t argmax(std::span<const float> row) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = i;  // first maximum, like torch.argmax
  return static_cast<token_t>(best);
}

/// Greedy continuation of `prompt`, one token per forward after the prompt.
std::vector<token_t> greedy(specdec::cpu::Transformer& model, const std::vector<token_t>& prompt,
                            std::size_t count) {
  model.reset();
  std::vector<token_t> out;
  specdec::LogitsView logits = model.forward(prompt);
  for (std::size_t i = 0; i < count; ++i) {
    const token_t next = argmax(logits.row(logits.rows - 1));
    out.push_back(next);
    if (i + 1 < count) logits = model.forward(std::span(&out.back(), 1));
  }
  return out;
}

}  // namespace

TEST_CASE("trained pair reproduces the PyTorch greedy continuations", "[cpu][tinyllama]") {
  const auto pair = specdec::test::tinyllama_pair();
  if (pair.empty()) {
    WARN("SKIPPED: tinyllama-pair not found");
    return;
  }
  const std::vector<Reference> refs = read_reference(pair);
  REQUIRE(refs.size() == 40);
  for (const char* file : {"target-f32.gguf", "target-hf", "draft-f32.gguf", "draft-hf"}) {
    const bool is_target = std::string(file).starts_with("target");
    const specdec::LoadedModel loaded = specdec::load_model((pair / file).string());
    specdec::cpu::Transformer model(loaded, {.threads = 1});
    std::size_t matching = 0, forced_matching = 0;
    for (std::size_t p = 0; p < refs.size(); ++p) {
      const std::vector<token_t>& expected = is_target ? refs[p].target : refs[p].draft;
      if (p < decoded_prompts) {
        const std::vector<token_t> got = greedy(model, refs[p].prompt, expected.size());
        if (got == expected)
          ++matching;
        else
          UNSCOPED_INFO(fmt::format("{} prompt {}: expected {}\n got {}", file, p,
                                    fmt::join(expected, " "), fmt::join(got, " ")));
      }
      // Teacher-forced: one call over the prompt and the expected continuation.
      if (p % forced_stride != 0) continue;
      model.reset();
      std::vector<token_t> sequence = refs[p].prompt;
      sequence.insert(sequence.end(), expected.begin(), expected.end() - 1);
      const specdec::LogitsView logits = model.forward(sequence);
      bool all = true;
      for (std::size_t i = 0; i < expected.size(); ++i)
        all = all && argmax(logits.row(refs[p].prompt.size() - 1 + i)) == expected[i];
      forced_matching += all;
    }
    INFO(file);
    CHECK(matching == std::min(decoded_prompts, refs.size()));
    CHECK(forced_matching == (refs.size() + forced_stride - 1) / forced_stride);
  }
}
