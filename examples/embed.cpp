// The README's embedding example: speculative decoding of a prompt with a draft and a target
// model on the CPU backend, streaming the text as it is accepted.
//
//   specdec-embed TARGET.gguf DRAFT.gguf "prompt text"
#include <cstdio>
#include <exception>
#include <string>

#include <specdec/cpu/transformer.hpp>
#include <specdec/decoder/speculative.hpp>
#include <specdec/model/loader.hpp>

int main(int argc, char** argv) try {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TARGET.gguf DRAFT.gguf PROMPT\n", argv[0]);
    return 2;
  }
  // Weights stay in the memory-mapped files; each Transformer owns only its KV cache, which it
  // allocates whole: size it for the job, not for the model's context (often 32768 positions or
  // more, gigabytes of cache).
  const specdec::LoadedModel target_file = specdec::load_model(argv[1]);
  const specdec::LoadedModel draft_file = specdec::load_model(argv[2]);
  const specdec::cpu::Options options{.context_length = 1024};
  specdec::cpu::Transformer target(target_file, options);  // p
  specdec::cpu::Transformer draft(draft_file, options);    // q
  if (!target_file.tokenizer) throw specdec::Error(std::string(argv[1]) + ": no tokenizer");
  const specdec::Tokenizer& tokenizer = *target_file.tokenizer;

  // k = 4 drafted tokens per round; the vocabularies are checked to agree.
  specdec::SpeculativeDecoder decoder(draft, target, specdec::SpeculativeOptions{.k = 4},
                                      &tokenizer, draft_file.tokenizer.get());
  specdec::GenerationConfig config;
  config.max_new_tokens = 64;
  config.sampling.temperature = 0.8f;  // 0 is greedy; top_k, top_p, min_p too
  config.seed = 42;

  specdec::Callbacks callbacks;
  callbacks.on_token = [](const specdec::TokenEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
  };
  const specdec::GenerationResult result =
      decoder.generate(tokenizer.encode(argv[3]), config, callbacks);
  std::printf("\n%zu tokens in %zu target passes, acceptance %.2f, %.0f tokens/s\n",
              result.stats.tokens_emitted, result.stats.target_passes, result.stats.acceptance_rate,
              result.stats.tokens_per_second);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
