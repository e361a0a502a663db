// Harness of the sampling and verification kernels (cuda/kernels/{verify,process_logits,sample}.cu)
// in FlashInfer's layout, B sequences of k drafted tokens:
//
//   logits  B x (k+1) x V   target logits (f32)
//   p       B x (k+1) x V   processed target distributions
//   q       B x k x V       processed draft distributions
//   draft   B x k           drafted tokens, drawn from q on the host
//   accepted B, emitted B x (k+1)
//
// Variants: verify_chain (p, q), verify_chain_onehot (point-mass proposals), verify_chain_greedy
// on the raw logits, process_logits of the k + 1 rows followed by verify_chain (the device round's
// verification), and draft sampling (sample_rows, one row per sequence); threads per block. With
// B = 1, verify_tree on a tree of k point-mass children of the root, each the least likely token
// of the root's row: every child is rejected, so the kernel materialises, totals and finally
// samples the residual (a whole-row pass per rejected sibling, the sampled tree round's worst
// case).
// Check: the decisions (accepted counts, emitted tokens) equal the host sampling core's on the
// same distributions, bit for bit (include/specdec/sampling/batch.hpp); for the processing
// variant, on the distributions the device computed.
// Bandwidth: bytes = what the decisions require at least, from the outcomes: per sequence the
// tested entries p(x), q(x) (4 bytes each) and the rows read in full (residual: p and q rows;
// bonus or one-hot residual: one p row; greedy: rows 0 .. n); processing adds the logits read and
// p written once ((k + 1) x V x 8 bytes; its top-p bisection re-reads from L2 are not counted).
//
//   cuda_dev_verify [--check]     GPU: V = 32000 (Llama) and 151936 (Qwen2.5), B up to 64
//   cuda_emu_dev_verify           emulator: small shapes, checks only (ctest)
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kernels/sampling.hpp"
#include "specdec/sampling/sampling.hpp"

namespace {

using specdec::token_t;
namespace dev = specdec::cuda::dev;
namespace k = specdec::cuda::kernels;
namespace sp = specdec::sampling;

struct Shape {
  std::size_t batch, k, vocab;
};

const std::vector<Shape> kGpuShapes = {{1, 4, 32000},  {8, 4, 32000},  {64, 8, 32000},
                                       {1, 4, 151936}, {8, 8, 151936}, {64, 4, 151936}};
const std::vector<Shape> kEmulatedShapes = {{1, 1, 300}, {3, 4, 1001}, {2, 4, 4096}};

/// Peaked random logits, like a language model's (a few large, many small).
std::vector<float> random_logits(std::size_t rows, std::size_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(rows * vocab);
  for (auto& v : x) v = normal(rng);
  for (std::size_t r = 0; r < rows; ++r)
    for (int j = 0; j < 5; ++j) x[r * vocab + rng() % vocab] += 6.0f;
  return x;
}

std::vector<float> processed(const std::vector<float>& logits, std::size_t vocab,
                             const sp::SamplingParams& params) {
  std::vector<float> out(logits.size());
  for (std::size_t r = 0; r < logits.size() / vocab; ++r)
    sp::process_logits<float>(std::span(logits).subspan(r * vocab, vocab), params,
                              std::span(out).subspan(r * vocab, vocab));
  return out;
}

/// Inputs of one shape: target logits, p, a draft's q close to p, tokens drawn from q.
struct Batch {
  Shape s;
  std::vector<float> logits, p, q;
  std::vector<token_t> draft;
};

Batch make_batch(const Shape& s, std::uint32_t seed) {
  Batch b{s, random_logits(s.batch * (s.k + 1), s.vocab, seed), {}, {}, {}};
  std::vector<float> draft_logits(s.batch * s.k * s.vocab);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> noise(0.0f, 0.7f);
  for (std::size_t b_ = 0; b_ < s.batch; ++b_)
    for (std::size_t i = 0; i < s.k; ++i)
      for (std::size_t v = 0; v < s.vocab; ++v)
        draft_logits[(b_ * s.k + i) * s.vocab + v] =
            b.logits[(b_ * (s.k + 1) + i) * s.vocab + v] + noise(rng);
  b.p = processed(b.logits, s.vocab, {});
  b.q = processed(draft_logits, s.vocab, {});
  b.draft.resize(s.batch * s.k);
  for (std::size_t b_ = 0; b_ < s.batch; ++b_) {
    sp::PhiloxStream stream(seed, 1000 + b_);
    for (std::size_t i = 0; i < s.k; ++i)
      b.draft[b_ * s.k + i] = sp::sample_from<float>(
          std::span(b.q).subspan((b_ * s.k + i) * s.vocab, s.vocab), stream.next());
  }
  return b;
}

/// The minimal bytes of a verification, from its outcomes (see the top of this file).
double verify_bytes(const Shape& s, const std::vector<std::int32_t>& accepted, bool with_q,
                    bool greedy) {
  double bytes = 0;
  const double row = 4.0 * static_cast<double>(s.vocab);
  for (const std::int32_t n : accepted) {
    const auto a = static_cast<std::size_t>(n);
    if (greedy) {
      bytes += row * static_cast<double>(a + 1);
      continue;
    }
    const std::size_t tested = std::min(a + 1, s.k);
    bytes += 4.0 * static_cast<double>(tested) * (with_q ? 2 : 1);
    bytes += a < s.k && with_q ? 2 * row : row;
  }
  return bytes;
}

std::string shape_label(const char* variant, const Shape& s, int threads) {
  return std::string(variant) + " B=" + std::to_string(s.batch) + " k=" + std::to_string(s.k) +
         " V=" + std::to_string(s.vocab) + " threads=" + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  dev::Harness h(argc, argv, "sampling and verification kernels");
  const auto& shapes = dev::kEmulated ? kEmulatedShapes : kGpuShapes;
  const std::vector<int> thread_variants =
      dev::kEmulated ? std::vector<int>{64} : std::vector<int>{128, 256, 512};
  const std::uint64_t seed = 0x5eed, counter = 77;

  for (const Shape& s : shapes) {
    const Batch b = make_batch(s, static_cast<std::uint32_t>(s.vocab + s.k));
    const int B = static_cast<int>(s.batch), K = static_cast<int>(s.k);
    const int V = static_cast<int>(s.vocab);
    dev::Buffer<float> d_logits(b.logits), d_p(b.p), d_q(b.q);
    dev::Buffer<token_t> d_draft(b.draft);
    dev::Buffer<std::int32_t> d_accepted(s.batch);
    dev::Buffer<token_t> d_emitted(s.batch * (s.k + 1));
    dev::Buffer<sp::VerifyOutcome> d_outcome(s.batch);
    std::vector<std::int32_t> accepted(s.batch);
    std::vector<token_t> emitted(s.batch * (s.k + 1));
    auto same = [&] {
      return d_accepted.download() == accepted && d_emitted.download() == emitted;
    };
    auto decisions = [&] {
      std::size_t full = 0;
      for (const std::int32_t n : accepted) full += static_cast<std::size_t>(n) == s.k;
      return std::to_string(s.batch - full) + " rejected, " + std::to_string(full) + " full";
    };

    for (const int threads : thread_variants) {
      // verify_chain
      sp::verify_chain_batch<float>(b.p, b.q, b.draft, s.batch, s.k, s.vocab, seed, counter,
                                    accepted, emitted);
      auto chain = [&] {
        k::verify_chain(d_p.get(), d_q.get(), d_draft.get(), B, K, V, seed, counter,
                        d_accepted.get(), d_emitted.get(), d_outcome.get(), nullptr, threads);
      };
      chain();
      h.row(shape_label("verify_chain", s, threads), same(), decisions(),
            h.timing() ? dev::time_ms(chain) : 0.0, verify_bytes(s, accepted, true, false));

      // verify_chain_onehot
      sp::verify_chain_onehot_batch<float>(b.p, b.draft, s.batch, s.k, s.vocab, seed, counter,
                                           accepted, emitted);
      auto onehot = [&] {
        k::verify_chain_onehot(d_p.get(), d_draft.get(), B, K, V, seed, counter, d_accepted.get(),
                               d_emitted.get(), d_outcome.get(), nullptr, threads);
      };
      onehot();
      h.row(shape_label("verify_chain_onehot", s, threads), same(), decisions(),
            h.timing() ? dev::time_ms(onehot) : 0.0, verify_bytes(s, accepted, false, false));

      // verify_chain_greedy on the logits
      const auto greedy_p = processed(b.logits, s.vocab, {.temperature = 0.0f});
      sp::verify_chain_greedy_batch<float>(greedy_p, b.draft, s.batch, s.k, s.vocab, accepted,
                                           emitted);
      auto greedy = [&] {
        k::verify_chain_greedy(d_logits.get(), true, d_draft.get(), B, K, V, d_accepted.get(),
                               d_emitted.get(), d_outcome.get(), nullptr, threads);
      };
      greedy();
      h.row(shape_label("verify_chain_greedy (logits)", s, threads), same(), decisions(),
            h.timing() ? dev::time_ms(greedy) : 0.0, verify_bytes(s, accepted, false, true));

      // process_logits of the k + 1 rows, then verify_chain: the device round's verification.
      const sp::SamplingParams params{.temperature = 0.8f, .top_p = 0.95f};
      dev::Buffer<float> d_processed(b.logits.size());
      dev::Buffer<int> d_bad(s.batch * (s.k + 1));
      auto process_verify = [&] {
        k::process_logits(d_logits.get(), B * (K + 1), V, params, d_processed.get(), d_bad.get(),
                          nullptr, threads);
        k::verify_chain(d_processed.get(), d_q.get(), d_draft.get(), B, K, V, seed, counter,
                        d_accepted.get(), d_emitted.get(), d_outcome.get(), nullptr, threads);
      };
      process_verify();
      const auto device_p = d_processed.download();
      sp::verify_chain_batch<float>(device_p, b.q, b.draft, s.batch, s.k, s.vocab, seed, counter,
                                    accepted, emitted);
      h.row(shape_label("process_logits + verify_chain", s, threads), same(), decisions(),
            h.timing() ? dev::time_ms(process_verify) : 0.0,
            8.0 * static_cast<double>(b.logits.size()) + verify_bytes(s, accepted, true, false));

      // Draft sampling: row b of the draft's logits (here: the target's first rows) -> q, token.
      dev::Buffer<float> d_q_out(s.batch * s.vocab);
      dev::Buffer<token_t> d_tokens(s.batch);
      auto sample = [&] {
        k::sample_rows(d_logits.get(), B, V, params, seed, 1000, counter, d_q_out.get(),
                       d_tokens.get(), d_bad.get(), nullptr, threads);
      };
      sample();
      const auto q_out = d_q_out.download();
      const auto tokens = d_tokens.download();
      bool ok = true;
      for (std::size_t r = 0; r < s.batch; ++r) {
        const token_t host = sp::sample_from<float>(std::span(q_out).subspan(r * s.vocab, s.vocab),
                                                    sp::philox_uniform(seed, 1000 + r, counter));
        ok = ok && tokens[r] == host;
      }
      h.row(shape_label("sample_rows (draft sampling)", s, threads), ok,
            std::to_string(s.batch) + " tokens", h.timing() ? dev::time_ms(sample) : 0.0,
            12.0 * static_cast<double>(s.batch * s.vocab));

      if (s.batch == 1) {
        // verify_tree: the root (row 0) and k children, the k least likely tokens of row 0.
        const std::size_t n = s.k + 1;
        std::vector<std::int32_t> parents(n, 0);
        parents[0] = -1;
        std::vector<token_t> tree_tokens(n, 0);
        std::vector<std::size_t> order(s.vocab);
        for (std::size_t v = 0; v < s.vocab; ++v) order[v] = v;
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(s.k),
                          order.end(),
                          [&](std::size_t a, std::size_t c) { return b.p[a] < b.p[c]; });
        for (std::size_t c = 1; c < n; ++c) tree_tokens[c] = static_cast<token_t>(order[c - 1]);
        const sp::PhiloxUniforms u{seed, 3, counter};
        std::vector<float> scratch(s.vocab);
        const sp::TreeVerifyOutcome host = sp::verify_tree_row(
            b.p.data(), static_cast<const float*>(nullptr), tree_tokens.data(), parents.data(), n,
            s.vocab, sp::TreeProposal::point_mass, u, scratch.data());
        dev::Buffer<token_t> d_tree_tokens(tree_tokens);
        dev::Buffer<std::int32_t> d_parents(parents);
        dev::Buffer<float> d_scratch(s.vocab);
        dev::Buffer<k::RoundArgs> d_args(std::vector<k::RoundArgs>{{{}, seed, 3, counter}});
        dev::Buffer<sp::TreeVerifyOutcome> d_tree_outcome(1);
        auto tree = [&] {
          k::verify_tree(d_p.get(), false, d_tree_tokens.get(), d_parents.get(),
                         static_cast<int>(n), V, d_args.get(), d_scratch.get(),
                         d_tree_outcome.get(), nullptr, threads);
        };
        tree();
        const sp::TreeVerifyOutcome device = d_tree_outcome.download().front();
        const bool tree_ok = device.node == host.node && device.depth == host.depth &&
                             device.next == host.next && device.error == host.error;
        // Bytes: the root's row read to check it, then per rejected sibling after the first the
        // scratch row written and read for its total, and read once more for the sample.
        h.row(shape_label("verify_tree (k children rejected)", s, threads), tree_ok,
              "depth " + std::to_string(host.depth) + ", next " + std::to_string(host.next),
              h.timing() ? dev::time_ms(tree) : 0.0,
              4.0 * static_cast<double>(s.vocab) * static_cast<double>(3 * s.k + 1));
      }
    }
  }
  return h.finish();
}
