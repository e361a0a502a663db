// SpeculativeDecoder over two emulated CUDA models (the tinyllama pair with F16 weights) emits
// exactly the greedy tokens of SpeculativeDecoder over two CPU models with the same weights, and
// those of plain greedy decoding of the CUDA target (steps of <= 16 tokens are batch-invariant,
// so verifying k tokens at once gives the bits of decoding them one by one).
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_f16.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/cuda/transformer.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "support.hpp"

using specdec::token_t;

TEST_CASE("greedy speculative decoding: emulated CUDA pair == CPU pair",
          "[cuda-emu][transformer][decoder]") {
  const auto target = specdec::test::load_f16("target-f32.gguf");
  const auto draft = specdec::test::load_f16("draft-f32.gguf");
  if (!target || !draft) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  std::vector<std::vector<token_t>> prompts;
  {
    std::ifstream in(specdec::test::tinyllama_pair() / "greedy-reference.jsonl");
    std::string line;
    // One code prompt and one prose prompt (the file lists the code prompts first).
    for (int i = 0; std::getline(in, line); ++i) {
      if (i == 0 || i == 20)
        prompts.push_back(nlohmann::json::parse(line).at("prompt_ids").get<std::vector<token_t>>());
    }
  }
  REQUIRE(prompts.size() == 2);

  specdec::GenerationConfig config;
  config.max_new_tokens = 10;
  config.sampling.temperature = 0.0f;
  config.stop_at_eos = false;

  auto cuda_options = specdec::test::emulator_friendly();
  cuda_options.context_length = 96;
  specdec::cpu::Options cpu_options;
  cpu_options.kv_type = specdec::cpu::KvType::f16;
  cpu_options.context_length = 96;

  for (const auto& prompt : prompts) {
    specdec::cpu::Transformer cpu_target(target->config, target->store, cpu_options);
    specdec::cpu::Transformer cpu_draft(draft->config, draft->store, cpu_options);
    specdec::SpeculativeDecoder cpu_decoder(cpu_draft, cpu_target,
                                            specdec::SpeculativeOptions{.k = 4});
    const auto expected = cpu_decoder.generate(prompt, config).tokens;

    specdec::cuda::Transformer gpu_target(target->config, target->store, cuda_options);
    specdec::cuda::Transformer gpu_draft(draft->config, draft->store, cuda_options);
    specdec::cuda::HostLogits target_view(gpu_target);
    specdec::cuda::HostLogits draft_view(gpu_draft);
    specdec::SpeculativeDecoder gpu_decoder(draft_view, target_view,
                                            specdec::SpeculativeOptions{.k = 4});
    const auto speculative = gpu_decoder.generate(prompt, config);
    CHECK(speculative.tokens == expected);
    CHECK(speculative.stats.rounds < config.max_new_tokens);  // the draft was of some use

    if (&prompt == &prompts.front()) {  // one prompt is enough for this (and emulation is slow)
      gpu_target.reset();
      specdec::AutoregressiveDecoder plain(target_view);
      CHECK(plain.generate(prompt, config).tokens == speculative.tokens);
    }
  }
}
