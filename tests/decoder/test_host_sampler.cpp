// HostSampler at full vocabulary (V = 151936, Qwen2.5): the lazy round (p(x) alone for accepted
// tokens, one row materialised) decides exactly what processing every row in full and calling
// the sampling core decides, with the same uniforms, and records the same p(x), q(x).
#include <cstddef>
#include <random>
#include <span>
#include <vector>

#include "specdec/decoder/sampler.hpp"
#include "specdec/sampling/sampling.hpp"
#include "specdec_test.hpp"

using specdec::token_t;
namespace sp = specdec::sampling;

namespace {

constexpr std::size_t kVocab = 151936;

/// LM-like target logits (a N(0, 2^2) body and a few lifted tokens) and draft logits that are
/// the target's plus noise, k + 1 rows of each.
struct Rows {
  std::vector<float> target, draft;
  Rows(std::uint64_t seed, std::size_t rows, float noise) : target(rows * kVocab) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<std::size_t> token(0, kVocab - 1);
    for (float& l : target) l = 2.0f * normal(gen);
    for (std::size_t r = 0; r < rows; ++r) {
      for (int j = 0; j < 6; ++j) target[r * kVocab + token(gen)] += 9.0f + 2.0f * float(j);
    }
    draft = target;
    for (float& l : draft) l += noise * normal(gen);
  }
  [[nodiscard]] specdec::LogitsView target_rows(std::size_t first, std::size_t n) const {
    return {target.data() + first * kVocab, n, kVocab, specdec::Memory::host};
  }
  [[nodiscard]] specdec::LogitsView draft_row(std::size_t r) const {
    return {draft.data() + r * kVocab, 1, kVocab, specdec::Memory::host};
  }
};

}  // namespace

TEST_CASE("HostSampler's lazy rounds decide as full processing does", "[decoder][sampler]") {
  constexpr std::size_t k = 4;
  const std::vector<sp::SamplingParams> settings = {
      {.temperature = 0.0f},
      {.temperature = 0.8f},
      {.temperature = 1.0f, .top_k = 40},
      {.temperature = 0.8f, .top_p = 0.95f},
      {.temperature = 0.8f, .min_p = 0.05f},
  };
  std::size_t rejections = 0;
  std::size_t bonuses = 0;
  for (const sp::SamplingParams& params : settings) {
    for (const float noise : {0.3f, 3.0f}) {
      INFO("T " << params.temperature << " top_k " << params.top_k << " top_p " << params.top_p
                << " min_p " << params.min_p << " noise " << noise);
      const Rows rows(static_cast<std::uint64_t>(noise * 10) + 3, k + 1, noise);
      specdec::HostSampler sampler(kVocab, k);
      const std::uint64_t seed = 11;
      sampler.begin(params, seed);
      for (int round = 0; round < 3; ++round) {
        sampler.begin_round(1);
        for (std::size_t i = 0; i < k; ++i) sampler.draft_rows(rows.draft_row(i), 1, 10 + i);
        const auto verdict =
            sampler.verify(rows.target_rows(0, k + 1), k, specdec::Proposal::sampled, 10);
        const std::vector<token_t> drafted(verdict.drafted.begin(), verdict.drafted.end());

        // The full computation: every row processed, the core's verify on them.
        std::vector<float> p((k + 1) * kVocab);
        std::vector<float> q(k * kVocab);
        for (std::size_t r = 0; r <= k; ++r)
          sp::process_logits<float>(rows.target_rows(r, 1).row(0), params,
                                    std::span(p).subspan(r * kVocab, kVocab));
        for (std::size_t r = 0; r < k; ++r)
          sp::process_logits<float>(rows.draft_row(r).row(0), params,
                                    std::span(q).subspan(r * kVocab, kVocab));
        sp::VerifyResult want{};
        if (params.greedy()) {
          want = sp::verify_chain_greedy<float>(p, drafted, kVocab);
        } else {
          // The round's target uniforms: counters (k + 1) * round of the target stream.
          sp::PhiloxStream rng(seed, specdec::kTargetStream, (k + 1) * std::uint64_t(round));
          want = sp::verify_chain<float>(p, q, drafted, kVocab, rng);
        }
        CHECK(verdict.accepted == want.accepted);
        CHECK(verdict.next == want.next);
        for (std::size_t i = 0; i < k; ++i) {
          const auto x = static_cast<std::size_t>(drafted[i]);
          CHECK(verdict.p_drafted[i] == p[i * kVocab + x]);
          CHECK(verdict.q_drafted[i] == q[i * kVocab + x]);
        }
        rejections += verdict.accepted < k;
        bonuses += verdict.accepted == k;
      }
    }
  }
  // Both ends of a round were exercised.
  CHECK(rejections > 0);
  CHECK(bonuses > 0);
}
