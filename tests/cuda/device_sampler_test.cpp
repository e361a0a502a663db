// One speculative round driven by hand through cuda::DeviceSampler (the RoundSampler of device
// logits): the draft model's rows are sampled on the device as its forward steps' epilogues, the
// target's rows verified as its forward's, and every decision is the one the host sampling core
// makes from the distributions the device used (copied back for the check) with the same Philox
// counters. Also the phase API's unfused path (verify on logits the caller computed).
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
  specdec::cuda::DeviceSampler sampler(target, k);

  const std::vector<token_t> prompt = {1, 450, 3200, 310, 13, 259, 1007};
  const std::size_t start = prompt.size() - 1;
  const std::uint64_t seed = 7;

  for (const bool fused : {true, false}) {
    for (const sp::SamplingParams params : {sp::SamplingParams{.temperature = 0.9f, .top_p = 0.95f},
                                            sp::SamplingParams{.temperature = 0.0f}}) {
      INFO("temperature " << params.temperature << (fused ? ", fused" : ", unfused"));
      target.rollback(0);
      draft.rollback(0);
      (void)target.forward(std::span(prompt).first(start));
      (void)draft.forward(std::span(prompt).first(start));
      sampler.begin(params, seed);
      // Two rounds: the second one's counters follow from the first's.
      std::uint64_t draft_counter = 0, target_counter = 0;
      for (int round = 0; round < 2; ++round) {
        target.rollback(start);
        draft.rollback(start);
        sampler.begin_round(prompt.back());
        sampler.draft(draft, std::span(prompt).subspan(start), start);
        for (std::size_t i = 1; i < k; ++i) sampler.draft_next(draft, start + i);
        specdec::RoundVerdict got;
        if (fused) {
          got = sampler.verify_forward(target, k, specdec::Proposal::sampled, start);
        } else {
          const auto input = sampler.target_input(k);
          REQUIRE(input.device.count == k + 1);
          const auto rows = target.forward(input.device);
          got = sampler.verify(rows, k, specdec::Proposal::sampled, start);
        }
        const std::vector<token_t> drafted(got.drafted.begin(), got.drafted.end());
        REQUIRE(drafted.size() == k);

        // The host core, on the distributions the device used.
        const auto q = sampler.q_rows(k);
        for (std::size_t i = 0; i < k; ++i) {
          const auto row = std::span<const float>(q).subspan(i * vocab, vocab);
          const token_t host =
              params.greedy()
                  ? static_cast<token_t>(sp::argmax<float>(row))
                  : sp::sample_from<float>(
                        row, sp::philox_uniform(seed, specdec::kDraftStream, draft_counter + i));
          CHECK(drafted[i] == host);
        }
        sp::VerifyResult expected{};
        if (params.greedy()) {
          const auto logits = target.logits_to_host();
          std::vector<float> p((k + 1) * vocab);
          for (std::size_t r = 0; r <= k; ++r) {
            sp::process_logits<float>(logits.row(r), params,
                                      std::span(p).subspan(r * vocab, vocab));
          }
          expected = sp::verify_chain_greedy<float>(p, drafted, vocab);
        } else {
          const auto p = sampler.p_rows(k);
          sp::PhiloxStream rng(seed, specdec::kTargetStream, target_counter);
          expected = sp::verify_chain<float>(p, q, drafted, vocab, rng);
          draft_counter += k;
          target_counter += k + 1;
        }
        CHECK(got.accepted == expected.accepted);
        CHECK(got.next == expected.next);
      }
    }
  }
  // The draft steps replay one graph per (tokens, splits), whatever the slot.
  CHECK(draft.graph_stats().replays > 0);
}
