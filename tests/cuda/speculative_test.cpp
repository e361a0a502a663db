// Speculative decoding over two emulated CUDA models (the tinyllama pair with F16 weights), end to
// end on the device path: SpeculativeDecoder<cuda::Transformer, cuda::Transformer> samples with
// cuda::DeviceSampler (draft sampling, the target's k + 1 rows, verification and the bonus on the
// device; the drafted tokens are fed to the models from device memory; the draft and verify steps
// replay CUDA graphs). Checked against:
//   - greedy: the CPU pair with the same weights and plain greedy decoding of the CUDA target,
//     token for token (steps of <= 16 tokens are batch-invariant, so verifying k tokens at once
//     gives the bits of decoding them one by one);
//   - sampled: the host decoder (HostSampler) over the same CUDA models seen through a host copy
//     of their logits, on the same seed: the logits are bitwise equal, the processed
//     distributions equal to rounding (device processing sums in parallel), and the decisions
//     the same (the uniforms are the same Philox counters; a decision could only differ if a
//     uniform fell within rounding of a CDF boundary, about 1e-6 per decision);
//   - token trees (the suffix drafter's, verified in one forward_tree with DeviceSampler::
//     verify_tree): greedy == greedy target-only; sampled == the host decoder on the same logits;
//   - errors: NaN logits name the model and the position.
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

namespace {

/// A cuda::Transformer seen through host logits (each forward's rows copied to the host): the
/// same logits, bit for bit, for the host decoder.
class HostCopy {
 public:
  explicit HostCopy(specdec::cuda::Transformer& model) : model_(&model) {}
  specdec::LogitsView forward(std::span<const token_t> tokens) {
    (void)model_->forward(tokens);
    return model_->logits_to_host();
  }
  void rollback(std::size_t n) { model_->rollback(n); }
  specdec::LogitsView forward_tree(std::span<const token_t> tokens,
                                   std::span<const std::int32_t> parents) {
    (void)model_->forward_tree(tokens, parents);
    return model_->logits_to_host();
  }
  specdec::LogitsView extend_tree(std::span<const token_t> tokens,
                                  std::span<const std::int32_t> parents) {
    (void)model_->extend_tree(tokens, parents);
    return model_->logits_to_host();
  }
  void accept_path(std::span<const std::size_t> path) { model_->accept_path(path); }
  static constexpr std::size_t max_tree_nodes = specdec::cuda::Transformer::max_tree_nodes;
  [[nodiscard]] std::size_t cached() const { return model_->cached(); }
  [[nodiscard]] std::size_t vocab_size() const { return model_->vocab_size(); }
  [[nodiscard]] std::size_t context_length() const { return model_->context_length(); }

 private:
  specdec::cuda::Transformer* model_;
};
static_assert(specdec::logits_memory_v<HostCopy> == specdec::Memory::host);
static_assert(specdec::logits_memory_v<specdec::cuda::Transformer> == specdec::Memory::device);
static_assert(
    std::same_as<specdec::sampler_for_t<specdec::cuda::Transformer>, specdec::cuda::DeviceSampler>);

/// One code prompt and one prose prompt of the pair's reference file.
std::vector<std::vector<token_t>> two_prompts() {
  std::vector<std::vector<token_t>> prompts;
  std::ifstream in(specdec::test::tinyllama_pair() / "greedy-reference.jsonl");
  std::string line;
  for (int i = 0; std::getline(in, line); ++i) {
    if (i == 0 || i == 20)
      prompts.push_back(nlohmann::json::parse(line).at("prompt_ids").get<std::vector<token_t>>());
  }
  REQUIRE(prompts.size() == 2);
  return prompts;
}

specdec::cuda::Options cuda_options() {
  auto o = specdec::test::emulator_friendly();
  o.context_length = 96;
  return o;
}

/// The suffix drafter's trees labelled as candidates drawn from q without replacement (one
/// uniform row for every node), which the device sampler cannot verify.
class SampledLabelDrafter : public specdec::SuffixDrafter {
 public:
  explicit SampledLabelDrafter(std::size_t vocab) : vocab_(vocab) {}
  const specdec::DraftTree& draft_tree(std::span<const token_t> sequence, std::size_t n) {
    tree_ = specdec::SuffixDrafter::draft_tree(sequence, n);
    tree_.proposal = specdec::sampling::TreeProposal::sampled_without_replacement;
    tree_.vocab = vocab_;
    tree_.q_rows.assign(tree_.size() + 1, 0);
    tree_.q.assign(vocab_, 1.0f / static_cast<float>(vocab_));
    return tree_;
  }

 private:
  std::size_t vocab_;
  specdec::DraftTree tree_;
};

}  // namespace

TEST_CASE("greedy speculative decoding on the device == CPU pair == greedy target-only",
          "[cuda-emu][transformer][decoder]") {
  const auto target = specdec::test::load_f16("target-f32.gguf");
  const auto draft = specdec::test::load_f16("draft-f32.gguf");
  if (!target || !draft) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  specdec::GenerationConfig config;
  config.max_new_tokens = 10;
  config.sampling.temperature = 0.0f;
  config.stop_at_eos = false;
  config.record_rounds = true;
  specdec::cpu::Options cpu_options;
  cpu_options.kv_type = specdec::KvType::f16;
  cpu_options.context_length = 96;

  const auto prompts = two_prompts();
  for (const auto& prompt : prompts) {
    specdec::cpu::Transformer cpu_target(target->config, target->store, cpu_options);
    specdec::cpu::Transformer cpu_draft(draft->config, draft->store, cpu_options);
    specdec::SpeculativeDecoder cpu_decoder(cpu_draft, cpu_target,
                                            specdec::SpeculativeOptions{.k = 4});
    const auto expected = cpu_decoder.generate(prompt, config).tokens;

    specdec::cuda::Transformer gpu_target(target->config, target->store, cuda_options());
    specdec::cuda::Transformer gpu_draft(draft->config, draft->store, cuda_options());
    specdec::SpeculativeDecoder gpu_decoder(gpu_draft, gpu_target,
                                            specdec::SpeculativeOptions{.k = 4});
    const auto speculative = gpu_decoder.generate(prompt, config);
    CHECK(speculative.tokens == expected);
    CHECK(speculative.stats.rounds < config.max_new_tokens);  // the draft was of some use
    // The rounds' records carry the drafted tokens the device drew.
    std::size_t drafted = 0;
    for (const auto& r : speculative.rounds) drafted += r.drafted.size();
    CHECK(drafted == speculative.stats.drafted);
    // Draft and verify steps were captured into graphs and replayed.
    CHECK(gpu_draft.graph_stats().replays > 0);
    CHECK(gpu_target.graph_stats().captures > 0);

    if (&prompt == &prompts.front()) {  // one prompt is enough for this (emulation is slow)
      specdec::AutoregressiveDecoder plain(gpu_target);
      CHECK(plain.generate(prompt, config).tokens == speculative.tokens);
      // A second run of the same decoder replays the graphs it captured.
      const auto captures = gpu_target.graph_stats().captures;
      auto shorter = config;
      shorter.max_new_tokens = 3;
      CHECK(plain.generate(prompt, shorter).tokens ==
            std::vector<token_t>(speculative.tokens.begin(), speculative.tokens.begin() + 3));
      CHECK(gpu_target.graph_stats().captures == captures);
    }
  }
}

TEST_CASE("sampled speculative decoding on the device == the host decoder on the same logits",
          "[cuda-emu][transformer][decoder]") {
  const auto target = specdec::test::load_f16("target-f32.gguf");
  const auto draft = specdec::test::load_f16("draft-f32.gguf");
  if (!target || !draft) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  const auto prompt = two_prompts().front();
  // Separate model objects for the two paths (the same weights: bitwise the same logits).
  specdec::cuda::Transformer gpu_target(target->config, target->store, cuda_options());
  specdec::cuda::Transformer gpu_draft(draft->config, draft->store, cuda_options());
  specdec::cuda::Transformer copied_target(target->config, target->store, cuda_options());
  specdec::cuda::Transformer copied_draft(draft->config, draft->store, cuda_options());
  HostCopy host_target(copied_target);
  HostCopy host_draft(copied_draft);

  specdec::GenerationConfig config;
  config.max_new_tokens = 10;
  config.stop_at_eos = false;
  config.record_rounds = true;
  struct Setting {
    specdec::sampling::SamplingParams params;
    std::uint64_t seed;
  };
  for (const Setting& s : {Setting{{.temperature = 1.0f}, 5},
                           Setting{{.temperature = 0.8f, .top_k = 40, .top_p = 0.9f}, 9}}) {
    INFO("temperature " << s.params.temperature << ", seed " << s.seed);
    config.sampling = s.params;
    config.seed = s.seed;
    specdec::SpeculativeDecoder device(gpu_draft, gpu_target, specdec::SpeculativeOptions{.k = 3});
    specdec::SpeculativeDecoder host(host_draft, host_target, specdec::SpeculativeOptions{.k = 3});
    const auto d = device.generate(prompt, config);
    const auto h = host.generate(prompt, config);
    CHECK(d.tokens == h.tokens);
    REQUIRE(d.rounds.size() == h.rounds.size());
    std::size_t rejections = 0;
    for (std::size_t i = 0; i < d.rounds.size(); ++i) {
      CHECK(d.rounds[i].drafted == h.rounds[i].drafted);
      CHECK(d.rounds[i].accepted == h.rounds[i].accepted);
      rejections += d.rounds[i].rejected >= 0;
    }
    CHECK(rejections > 0);  // the residual path was taken, not only acceptances

    if (s.seed != 5) continue;  // one continuation is enough (emulation is slow)
    // Continuing the conversation: only the new tokens are prefilled, on both paths alike.
    const std::vector<token_t> turn = {13, 450, 3200};
    CHECK(gpu_target.cached() + 1 == prompt.size() + d.tokens.size());
    const auto d2 = device.continue_with(turn, config);
    CHECK(d2.stats.prompt_tokens == turn.size());
    CHECK(device.session().sequence().size() ==
          prompt.size() + d.tokens.size() + turn.size() + d2.tokens.size());
    const auto h2 = host.continue_with(turn, config);
    CHECK(d2.tokens == h2.tokens);
  }

  // The n-gram drafter over the device target: point-mass verification on the device.
  config.sampling = {.temperature = 0.9f};
  config.seed = 4;
  specdec::NGramDrafter ngram_d, ngram_h;
  specdec::SpeculativeDecoder device(ngram_d, gpu_target, specdec::SpeculativeOptions{.k = 3});
  specdec::SpeculativeDecoder host(ngram_h, host_target, specdec::SpeculativeOptions{.k = 3});
  CHECK(device.generate(prompt, config).tokens == host.generate(prompt, config).tokens);
}

TEST_CASE(
    "token-tree speculation on the device (suffix drafter): greedy == target-only, "
    "sampled == the host decoder",
    "[cuda-emu][transformer][decoder][tree]") {
  const auto target = specdec::test::load_f16("target-f32.gguf");
  if (!target) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  // A prompt that repeats itself, so that the suffix index proposes branching trees.
  auto prompt = two_prompts().front();
  const std::vector<token_t> head(prompt.begin(), prompt.begin() + 12);
  prompt.insert(prompt.end(), head.begin(), head.end());
  specdec::cuda::Transformer gpu_target(target->config, target->store, cuda_options());
  specdec::cuda::Transformer copied_target(target->config, target->store, cuda_options());
  HostCopy host_target(copied_target);
  const specdec::SpeculativeOptions trees{.max_tree_nodes = 8};

  specdec::GenerationConfig config;
  config.max_new_tokens = 14;
  config.stop_at_eos = false;
  config.record_rounds = true;
  config.sampling.temperature = 0.0f;
  specdec::SuffixDrafter suffix;
  specdec::SpeculativeDecoder device(suffix, gpu_target, trees);
  const auto greedy = device.generate(prompt, config);
  specdec::AutoregressiveDecoder plain(gpu_target);
  CHECK(greedy.tokens == plain.generate(prompt, config).tokens);
  CHECK(greedy.stats.accepted > 0);
  // Some round verified a tree, not a chain: two nodes with one parent.
  auto branches = [](const std::vector<std::int32_t>& parents) {
    for (std::size_t i = 0; i < parents.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (parents[i] == parents[j]) return true;
    return false;
  };
  std::size_t branching = 0;
  for (const auto& r : greedy.rounds) branching += branches(r.tree_parents);
  CHECK(branching > 0);

  for (const std::uint64_t seed : {3u, 8u}) {
    INFO("seed " << seed);
    config.sampling = {.temperature = 0.9f, .top_p = 0.95f};
    config.seed = seed;
    specdec::SuffixDrafter suffix_d, suffix_h;
    specdec::SpeculativeDecoder on_device(suffix_d, gpu_target, trees);
    specdec::SpeculativeDecoder on_host(suffix_h, host_target, trees);
    const auto d = on_device.generate(prompt, config);
    const auto h = on_host.generate(prompt, config);
    CHECK(d.tokens == h.tokens);
    REQUIRE(d.rounds.size() == h.rounds.size());
    for (std::size_t i = 0; i < d.rounds.size(); ++i)
      CHECK(d.rounds[i].accepted == h.rounds[i].accepted);
  }

  // A tree of sampled candidates needs a sampler that verifies them; the device's verifies point
  // masses only, and says so instead of verifying the draws as point masses.
  SampledLabelDrafter labelled(gpu_target.vocab_size());
  specdec::SpeculativeDecoder refused(labelled, gpu_target, trees);
  CHECK_THROWS_WITH(refused.generate(prompt, config),
                    Catch::Contains("a tree of sampled candidates, but this sampler verifies "
                                    "point masses only"));

  // Trees larger than the CUDA target scores (64 nodes, the last token included) are refused.
  specdec::SuffixDrafter big;
  CHECK_THROWS_WITH(specdec::SpeculativeDecoder(big, gpu_target,
                                                specdec::SpeculativeOptions{.max_tree_nodes = 64}),
                    Catch::Contains("at most 63 drafted nodes"));
}

TEST_CASE("NaN logits on the device name the model and the position",
          "[cuda-emu][transformer][decoder]") {
  const auto target = specdec::test::load_f16("target-f32.gguf");
  const auto draft = specdec::test::load_f16("draft-f32.gguf");
  if (!target || !draft) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  const std::vector<token_t> prompt = {1, 450, 3200, 310, 13};
  const auto bad_target = specdec::test::with_nan_logit(target, 1234);
  const auto bad_draft = specdec::test::with_nan_logit(draft, 77);
  for (const float temperature : {0.0f, 0.8f}) {
    INFO("temperature " << temperature);
    specdec::GenerationConfig config;
    config.max_new_tokens = 4;
    config.sampling.temperature = temperature;
    {
      specdec::cuda::Transformer t(target->config, target->store, cuda_options());
      specdec::cuda::Transformer d(bad_draft->config, bad_draft->store, cuda_options());
      specdec::SpeculativeDecoder dec(d, t, specdec::SpeculativeOptions{.k = 2});
      // The first drafted token comes from the row of the last prompt token (position 4).
      CHECK_THROWS_WITH(dec.generate(prompt, config),
                        "draft model: logits at position 4 contain NaN (token 77)");
    }
    {
      specdec::cuda::Transformer t(bad_target->config, bad_target->store, cuda_options());
      specdec::cuda::Transformer d(draft->config, draft->store, cuda_options());
      specdec::SpeculativeDecoder dec(d, t, specdec::SpeculativeOptions{.k = 2});
      CHECK_THROWS_WITH(dec.generate(prompt, config),
                        "target model: logits at position 4 contain NaN (token 1234)");
      specdec::AutoregressiveDecoder plain(t);
      CHECK_THROWS_WITH(plain.generate(prompt, config),
                        "target model: logits at position 4 contain NaN (token 1234)");
    }
  }
}
