// One speculative round entirely on the (emulated) device: the draft model's logits are sampled
// by DeviceSampler::draft, the target's verified by DeviceSampler::verify, and the decisions are
// those the host sampling core makes from the same distributions (copied back for the check).
#include <vector>

#include "model_f16.hpp"
#include "specdec/cuda/sampler.hpp"
#include "specdec/cuda/transformer.hpp"
#include "specdec/sampling/sampling.hpp"
#include "support.hpp"

using specdec::token_t;
namespace sp = specdec::sampling;

TEST_CASE("DeviceSampler: a speculative round on the device == the host core's decisions",
          "[cuda-emu][transformer][sampling]") {
  const auto target_model = specdec::test::load_f16("target-f32.gguf");
  const auto draft_model = specdec::test::load_f16("draft-f32.gguf");
  if (!target_model || !draft_model) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  auto options = specdec::test::emulator_friendly();
  options.context_length = 64;
  specdec::cuda::Transformer target(target_model->config, target_model->store, options);
  specdec::cuda::Transformer draft(draft_model->config, draft_model->store, options);
  const std::size_t vocab = target.vocab_size();
  const std::size_t k = 4;
  specdec::cuda::DeviceSampler sampler(vocab, k, draft.stream());

  const std::vector<token_t> prompt = {1, 450, 3200, 310, 13, 259, 1007};
  (void)target.forward(std::span(prompt).first(prompt.size() - 1));
  (void)draft.forward(std::span(prompt).first(prompt.size() - 1));

  for (const sp::SamplingParams params : {sp::SamplingParams{.temperature = 0.9f, .top_p = 0.95f},
                                          sp::SamplingParams{.temperature = 0.0f}}) {
    INFO("temperature " << params.temperature);
    const std::uint64_t seed = 7, draft_stream = std::uint64_t{1} << 63, counter = 3;
    const std::size_t start = prompt.size() - 1;
    target.rollback(start);
    draft.rollback(start);
    std::vector<token_t> drafted;
    token_t last = prompt.back();
    for (std::size_t i = 0; i < k; ++i) {
      const auto logits = draft.forward(std::span(&last, 1));
      last = sampler.draft(logits, 0, i, params, seed, draft_stream, counter + i);
      drafted.push_back(last);
    }
    std::vector<token_t> verify_input = {prompt.back()};
    verify_input.insert(verify_input.end(), drafted.begin(), drafted.end());
    const auto target_logits = target.forward(verify_input);
    const sp::VerifyResult got = sampler.verify(target_logits, drafted, params, seed, counter);

    // The host core, on the distributions the device used.
    const auto q = sampler.q_rows(k);
    for (std::size_t i = 0; i < k; ++i) {
      const auto row = std::span<const float>(q).subspan(i * vocab, vocab);
      const token_t host =
          params.greedy()
              ? static_cast<token_t>(sp::argmax<float>(row))
              : sp::sample_from<float>(row, sp::philox_uniform(seed, draft_stream, counter + i));
      CHECK(drafted[i] == host);
    }
    sp::VerifyResult expected{};
    if (params.greedy()) {
      const auto logits = target.logits_to_host();
      std::vector<float> p((k + 1) * vocab);
      for (std::size_t r = 0; r <= k; ++r) {
        sp::process_logits<float>(logits.row(r), params, std::span(p).subspan(r * vocab, vocab));
      }
      expected = sp::verify_chain_greedy<float>(p, drafted, vocab);
    } else {
      const auto p = sampler.p_rows(k);
      sp::PhiloxStream rng(seed, 0, counter);
      expected = sp::verify_chain<float>(p, q, drafted, vocab, rng);
    }
    CHECK(got.accepted == expected.accepted);
    CHECK(got.next == expected.next);
  }
}
