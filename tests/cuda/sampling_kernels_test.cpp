// The sampling kernels against the host sampling core (include/specdec/sampling/): the fused
// chain verification makes bit for bit the host's decisions (accepted counts, emitted tokens,
// errors) on the same p, q and drafted tokens; draft sampling draws the host's token from the
// q it writes; processing keeps the host's token sets and matches its probabilities to rounding;
// argmax matches exactly; the token-tree verification (point masses, sampled and greedy) makes the
// host core's decisions and reports its errors. Shapes include B = 1 and 8, k = 1 and 16, V not a
// multiple of the 256-entry scan block nor of 8.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/sampling.hpp"
#include "specdec/sampling/sampling.hpp"
#include "support.hpp"

namespace {

using specdec::token_t;
using specdec::sampling::SamplingParams;
using specdec::sampling::VerifyError;
using specdec::sampling::VerifyOutcome;
using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;
namespace k = specdec::cuda::kernels;
namespace sp = specdec::sampling;

#if defined(SPECDEC_CUDA_EMULATION)
constexpr int kThreads = 64;  // fewer fibers per block: faster to emulate, same code
#else
constexpr int kThreads = 256;
#endif

/// Peaked random logits, like a language model's (a few large, many small).
std::vector<float> random_logits(std::size_t rows, std::size_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(rows * vocab);
  for (auto& v : x) v = normal(rng);
  for (std::size_t r = 0; r < rows; ++r) {
    for (int j = 0; j < 5; ++j) x[r * vocab + rng() % vocab] += 6.0f;
  }
  return x;
}

std::vector<float> processed(const std::vector<float>& logits, std::size_t vocab,
                             const SamplingParams& params) {
  std::vector<float> out(logits.size());
  for (std::size_t r = 0; r < logits.size() / vocab; ++r) {
    sp::process_logits<float>(std::span(logits).subspan(r * vocab, vocab), params,
                              std::span(out).subspan(r * vocab, vocab));
  }
  return out;
}

struct Batch {
  std::size_t batch, k, vocab;
  std::vector<float> p, q;
  std::vector<token_t> draft;
};

// p from "target" logits, q from correlated "draft" logits; drafted tokens sampled from q on
// the host (stream 1000 + b), so that acceptances and rejections both occur.
Batch make_batch(std::size_t batch, std::size_t kk, std::size_t vocab, std::uint32_t seed,
                 float noise) {
  Batch b{batch, kk, vocab, {}, {}, {}};
  const auto target = random_logits(batch * (kk + 1), vocab, seed);
  std::vector<float> draft_logits(batch * kk * vocab);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, noise);
  for (std::size_t s = 0; s < batch; ++s) {
    for (std::size_t i = 0; i < kk; ++i) {
      for (std::size_t v = 0; v < vocab; ++v) {
        draft_logits[(s * kk + i) * vocab + v] =
            target[(s * (kk + 1) + i) * vocab + v] + normal(rng);
      }
    }
  }
  b.p = processed(target, vocab, {});
  b.q = processed(draft_logits, vocab, {});
  b.draft.resize(batch * kk);
  for (std::size_t s = 0; s < batch; ++s) {
    sp::PhiloxStream stream(seed, 1000 + s);
    for (std::size_t i = 0; i < kk; ++i) {
      b.draft[s * kk + i] = sp::sample_from<float>(
          std::span(b.q).subspan((s * kk + i) * vocab, vocab), stream.next());
    }
  }
  return b;
}

struct DeviceResult {
  std::vector<std::int32_t> accepted;
  std::vector<token_t> emitted;
  std::vector<VerifyOutcome> outcome;
};

enum class Variant { chain, onehot, greedy_probs, greedy_logits };

DeviceResult run_device(const Batch& b, Variant variant, std::uint64_t seed, std::uint64_t counter,
                        const std::vector<float>* rows = nullptr) {
  DeviceBuffer<float> p(rows != nullptr ? *rows : b.p);
  DeviceBuffer<float> q(b.q.empty() ? std::vector<float>{0.0f} : b.q);
  DeviceBuffer<token_t> draft(b.draft.empty() ? std::vector<token_t>{0} : b.draft);
  DeviceBuffer<std::int32_t> accepted(b.batch);
  DeviceBuffer<token_t> emitted(b.batch * (b.k + 1));
  DeviceBuffer<VerifyOutcome> outcome(b.batch);
  const int B = static_cast<int>(b.batch), K = static_cast<int>(b.k), V = static_cast<int>(b.vocab);
  switch (variant) {
    case Variant::chain:
      k::verify_chain(p.get(), q.get(), draft.get(), B, K, V, seed, counter, accepted.get(),
                      emitted.get(), outcome.get(), nullptr, kThreads);
      break;
    case Variant::onehot:
      k::verify_chain_onehot(p.get(), draft.get(), B, K, V, seed, counter, accepted.get(),
                             emitted.get(), outcome.get(), nullptr, kThreads);
      break;
    case Variant::greedy_probs:
    case Variant::greedy_logits:
      k::verify_chain_greedy(p.get(), variant == Variant::greedy_logits, draft.get(), B, K, V,
                             accepted.get(), emitted.get(), outcome.get(), nullptr, kThreads);
      break;
  }
  return {accepted.download(), emitted.download(), outcome.download()};
}

}  // namespace

TEST_CASE("verify_chain kernel == host verify_chain_batch, bit for bit", "[cuda-emu][sampling]") {
  struct Shape {
    std::size_t batch, k, vocab;
  };
  for_each_order([] {
    std::size_t rejections = 0, full = 0;
    for (const Shape s : {Shape{1, 1, 1000}, Shape{8, 4, 1001}, Shape{2, 16, 300}, Shape{8, 1, 37},
                          Shape{1, 16, 4096}}) {
      for (float noise : {0.3f, 2.0f}) {
        const Batch b =
            make_batch(s.batch, s.k, s.vocab, static_cast<std::uint32_t>(s.vocab + s.k), noise);
        for (std::uint64_t counter : {0u, 77u, 12345u}) {
          INFO("B " << s.batch << " k " << s.k << " V " << s.vocab << " noise " << noise
                    << " counter " << counter);
          const std::uint64_t seed = 0x5eed0000u + s.vocab;
          std::vector<std::int32_t> accepted(s.batch);
          std::vector<token_t> emitted(s.batch * (s.k + 1));
          sp::verify_chain_batch<float>(b.p, b.q, b.draft, s.batch, s.k, s.vocab, seed, counter,
                                        accepted, emitted);
          const DeviceResult d = run_device(b, Variant::chain, seed, counter);
          REQUIRE(d.accepted == accepted);
          REQUIRE(d.emitted == emitted);
          for (const auto& o : d.outcome) REQUIRE(o.error == VerifyError::none);
          for (std::size_t i = 0; i < s.batch; ++i)
            (accepted[i] < static_cast<std::int32_t>(s.k) ? rejections : full)++;
        }
      }
    }
    CHECK(rejections > 10);  // both branches were exercised
    CHECK(full > 10);
  });
}

TEST_CASE("one-hot and greedy verification kernels == host", "[cuda-emu][sampling]") {
  for (const std::size_t vocab : {513u, 2000u}) {
    for (const std::size_t kk : {1u, 6u}) {
      Batch b = make_batch(3, kk, vocab, static_cast<std::uint32_t>(vocab * kk), 1.0f);
      INFO("V " << vocab << " k " << kk);
      // One-hot: point-mass proposals (the drafted tokens are kept from make_batch).
      std::vector<std::int32_t> accepted(b.batch);
      std::vector<token_t> emitted(b.batch * (kk + 1));
      sp::verify_chain_onehot_batch<float>(b.p, b.draft, b.batch, kk, vocab, 9u, 3u, accepted,
                                           emitted);
      DeviceResult d = run_device(b, Variant::onehot, 9u, 3u);
      CHECK(d.accepted == accepted);
      CHECK(d.emitted == emitted);

      // Greedy: drafts that agree with the target's argmax for a while.
      const auto logits = random_logits(b.batch * (kk + 1), vocab, 5u);
      const auto onehot = processed(logits, vocab, SamplingParams{.temperature = 0.0f});
      for (std::size_t s = 0; s < b.batch; ++s) {
        for (std::size_t i = 0; i < kk; ++i) {
          const auto row = std::span(logits).subspan((s * (kk + 1) + i) * vocab, vocab);
          b.draft[s * kk + i] = i < s + 1 ? static_cast<token_t>(sp::argmax<float>(row)) : 0;
        }
      }
      sp::verify_chain_greedy_batch<float>(onehot, b.draft, b.batch, kk, vocab, accepted, emitted);
      for (Variant v : {Variant::greedy_probs, Variant::greedy_logits}) {
        d = run_device(b, v, 0, 0, v == Variant::greedy_probs ? &onehot : &logits);
        CHECK(d.accepted == accepted);
        CHECK(d.emitted == emitted);
      }
    }
  }
}

TEST_CASE("verification kernels report the host's errors", "[cuda-emu][sampling]") {
  const std::size_t vocab = 300, kk = 3;
  auto check_same = [&](const Batch& b, Variant variant) {
    DeviceResult d = run_device(b, variant, 1u, 0u);
    VerifyOutcome host;
    const sp::PhiloxUniforms u{1u, 0u, 0u};
    if (variant == Variant::chain)
      host = sp::verify_chain_row(b.p.data(), b.q.data(), b.draft.data(), kk, vocab, u);
    if (variant == Variant::onehot)
      host = sp::verify_chain_onehot_row(b.p.data(), b.draft.data(), kk, vocab, u);
    if (variant == Variant::greedy_probs)
      host = sp::verify_chain_greedy_row(b.p.data(), b.draft.data(), kk, vocab);
    REQUIRE(host.error != VerifyError::none);
    CHECK(d.outcome[0].error == host.error);
    CHECK(d.outcome[0].where == host.where);
    CHECK(d.outcome[0].value == host.value);
    // The host wrapper turns it into the host API's exception.
    DeviceBuffer<VerifyOutcome> outcome(d.outcome);
    CHECK_THROWS_AS(k::throw_on_error(outcome.get(), 1, "verify", nullptr), specdec::Error);
  };
  Batch b = make_batch(1, kk, vocab, 3u, 0.5f);
  Batch bad = b;
  bad.draft[1] = static_cast<token_t>(vocab);  // out of the vocabulary
  for (Variant v : {Variant::chain, Variant::onehot, Variant::greedy_probs}) check_same(bad, v);
  bad = b;
  bad.q[1 * vocab + static_cast<std::size_t>(bad.draft[1])] = -0.5f;  // q_1(x_1) negative
  bad.p[0 * vocab + static_cast<std::size_t>(bad.draft[0])] = 0.0f;   // forces a rejection at 0 ...
  bad.q[0 * vocab + 7] = NAN;                                         // ... whose q row has a NaN
  check_same(bad, Variant::chain);
  bad = b;
  bad.p[kk * vocab + 11] = 0.5f;  // the bonus row no longer sums to 1
  bad.p[0 * vocab + 5] = -1.0f;   // and p_0 has a negative entry (greedy reads all rows)
  check_same(bad, Variant::greedy_probs);
  DeviceResult ok = run_device(b, Variant::chain, 1u, 0u);
  DeviceBuffer<VerifyOutcome> outcome(ok.outcome);
  CHECK_NOTHROW(k::throw_on_error(outcome.get(), 1, "verify", nullptr));
}

TEST_CASE("process_logits kernel == host processing", "[cuda-emu][sampling]") {
  const std::vector<SamplingParams> settings = {
      {},
      {.temperature = 0.7f},
      {.temperature = 1.3f, .top_k = 40},
      {.temperature = 1.0f, .top_k = 1},
      {.temperature = 0.9f, .top_p = 0.9f},
      {.temperature = 1.0f, .top_p = 0.5f, .min_p = 0.02f},
      {.temperature = 1.1f, .top_k = 100, .top_p = 0.95f, .min_p = 0.05f},
      {.temperature = 0.0f},
      // llama.cpp's order (the filters on the logits, temperature last) and its defaults.
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .temperature_last = true},
      {.temperature = 2.0f, .temperature_last = true},
      {.temperature = 0.5f, .top_p = 0.7f, .temperature_last = true},
      {.temperature = 1.5f, .top_k = 100, .min_p = 0.1f, .temperature_last = true},
  };
  for_each_order([&] {
    for (const std::size_t vocab : {257u, 3000u}) {
      const std::size_t rows = 3;
      auto logits = random_logits(rows, vocab, static_cast<std::uint32_t>(vocab));
      // Exact ties around the top-k boundary and at the maximum.
      logits[10] = logits[11] = logits[12] = 3.25f;
      logits[vocab + 3] = logits[vocab + 4] = 20.0f;
      for (const SamplingParams& params : settings) {
        INFO("V " << vocab << " T " << params.temperature << " top_k " << params.top_k << " top_p "
                  << params.top_p << " min_p " << params.min_p << " temperature last "
                  << params.temperature_last);
        const auto expected = processed(logits, vocab, params);
        DeviceBuffer<float> d_logits(logits);
        DeviceBuffer<float> d_probs(logits.size());
        DeviceBuffer<int> d_bad(rows);
        k::process_logits(d_logits.get(), static_cast<int>(rows), static_cast<int>(vocab), params,
                          d_probs.get(), d_bad.get(), nullptr, kThreads);
        const auto got = d_probs.download();
        for (int bad : d_bad.download()) REQUIRE(bad == -1);
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("entry " << i);
          REQUIRE((got[i] == 0.0f) == (expected[i] == 0.0f));  // the same tokens are kept
          REQUIRE(std::abs(got[i] - expected[i]) <= 2e-6f * expected[i] + 1e-12f);
        }
      }
    }
  });
  // A NaN logit is reported with its index.
  auto logits = random_logits(2, 100, 1u);
  logits[100 + 42] = NAN;
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<float> d_probs(logits.size());
  DeviceBuffer<int> d_bad(2);
  k::process_logits(d_logits.get(), 2, 100, {}, d_probs.get(), d_bad.get(), nullptr, kThreads);
  CHECK(d_bad.download() == std::vector<int>{-1, 42});
}

TEST_CASE("argmax and draft sampling kernels == host", "[cuda-emu][sampling]") {
  for (const std::size_t vocab : {33u, 1500u}) {
    const std::size_t rows = 8;
    auto logits = random_logits(rows, vocab, static_cast<std::uint32_t>(vocab + 1));
    logits[5] = logits[7] = 50.0f;  // a tie for the maximum: the lower index wins
    DeviceBuffer<float> d_logits(logits);
    DeviceBuffer<token_t> d_tokens(rows);
    k::argmax_rows(d_logits.get(), static_cast<int>(rows), static_cast<int>(vocab), d_tokens.get(),
                   nullptr, kThreads);
    const auto tokens = d_tokens.download();
    for (std::size_t r = 0; r < rows; ++r) {
      CHECK(tokens[r] ==
            static_cast<token_t>(sp::argmax<float>(std::span(logits).subspan(r * vocab, vocab))));
    }
    CHECK(tokens[0] == 5);

    for (const SamplingParams params :
         {SamplingParams{}, SamplingParams{.temperature = 0.8f, .top_p = 0.9f},
          SamplingParams{.temperature = 0.0f}}) {
      INFO("V " << vocab << " T " << params.temperature);
      DeviceBuffer<float> d_q(logits.size());
      DeviceBuffer<int> d_bad(rows);
      const std::uint64_t seed = 99, stream_base = 40, counter = 5;
      k::sample_rows(d_logits.get(), static_cast<int>(rows), static_cast<int>(vocab), params, seed,
                     stream_base, counter, d_q.get(), d_tokens.get(), d_bad.get(), nullptr,
                     kThreads);
      const auto q = d_q.download();
      const auto drawn = d_tokens.download();
      const auto expected_q = processed(logits, vocab, params);
      for (std::size_t r = 0; r < rows; ++r) {
        const auto qr = std::span(q).subspan(r * vocab, vocab);
        // The token is the host's draw from the q the kernel wrote, with the same uniform.
        const token_t host =
            params.greedy()
                ? static_cast<token_t>(sp::argmax<float>(qr))
                : sp::sample_from<float>(qr, sp::philox_uniform(seed, stream_base + r, counter));
        CHECK(drawn[r] == host);
        for (std::size_t v = 0; v < vocab; ++v) {
          REQUIRE(std::abs(qr[v] - expected_q[r * vocab + v]) <=
                  2e-6f * expected_q[r * vocab + v] + 1e-12f);
        }
      }
    }
  }
}

namespace {

/// A random tree of n nodes (node 0 the root) over rows of V, with p = processed random logits;
/// children's tokens are the parent's argmax, a sample of its p or a random token (so that tests
/// accept and reject), distinct among siblings (as a drafter's are).
struct Tree {
  std::vector<token_t> tokens;
  std::vector<std::int32_t> parents;
  std::vector<float> logits, p;
};

Tree make_tree(std::size_t n, std::size_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Tree t;
  t.logits = random_logits(n, vocab, seed);
  t.p = processed(t.logits, vocab, {});
  t.parents.assign(n, -1);
  t.tokens.assign(n, 0);
  for (std::size_t i = 1; i < n; ++i) {
    // Wide near the root, deeper later: parents among the first nodes.
    t.parents[i] = static_cast<std::int32_t>(rng() % std::min<std::size_t>(i, 1 + i / 2));
    const auto parent = static_cast<std::size_t>(t.parents[i]);
    const auto row = std::span<const float>(t.p).subspan(parent * vocab, vocab);
    // The parent's argmax for some, a sample of its p for others, a random token for the rest.
    const std::uint32_t kind = rng() % 3;
    token_t x = kind == 0   ? static_cast<token_t>(sp::argmax<float>(row))
                : kind == 1 ? static_cast<token_t>(sp::sample_from<float>(
                                  row, std::uniform_real_distribution<float>(0, 1)(rng)))
                            : static_cast<token_t>(rng() % vocab);
    for (std::size_t s = 1; s < i; ++s)  // distinct among siblings
      if (t.parents[s] == t.parents[i] && t.tokens[s] == x)
        x = (x + 1) % static_cast<token_t>(vocab);
    t.tokens[i] = x;
  }
  return t;
}

sp::TreeVerifyOutcome run_tree_kernel(const std::vector<float>& rows, bool greedy, const Tree& t,
                                      std::size_t vocab, std::uint64_t seed,
                                      std::uint64_t counter) {
  DeviceBuffer<float> d_rows(rows);
  DeviceBuffer<token_t> d_tokens(t.tokens);
  DeviceBuffer<std::int32_t> d_parents(t.parents);
  DeviceBuffer<float> scratch(vocab);
  DeviceBuffer<k::RoundArgs> args(std::vector<k::RoundArgs>{{SamplingParams{}, seed, 3, counter}});
  DeviceBuffer<sp::TreeVerifyOutcome> outcome(1);
  k::verify_tree(d_rows.get(), greedy, d_tokens.get(), d_parents.get(),
                 static_cast<int>(t.tokens.size()), static_cast<int>(vocab), args.get(),
                 scratch.get(), outcome.get(), nullptr, kThreads);
  return outcome.download().front();
}

void check_same_outcome(const sp::TreeVerifyOutcome& d, const sp::TreeVerifyOutcome& h) {
  CHECK(d.node == h.node);
  CHECK(d.depth == h.depth);
  CHECK(d.next == h.next);
  CHECK(d.error == h.error);
  CHECK(d.tree_error == h.tree_error);
  CHECK(d.where == h.where);
  CHECK(((std::isnan(d.value) && std::isnan(h.value)) || d.value == h.value));
}

}  // namespace

TEST_CASE("verify_tree kernel == the host core's tree rule, bit for bit",
          "[cuda-emu][sampling][tree]") {
  // Point-mass trees (a TreeDrafter's): sampled on distributions, greedy on raw logits. Many
  // seeds, so that nodes reject one child and accept a later one (the materialised residual),
  // reject them all (its sample), or reach a leaf (the bonus sample).
  std::size_t second_child_accepted = 0, residual_after_siblings = 0;
  for (const std::size_t vocab : {300u, 1031u}) {
    for (std::uint32_t seed = 1; seed <= 24; ++seed) {
      const std::size_t n = 2 + seed % 15;
      const Tree t = make_tree(n, vocab, seed * 7 + static_cast<std::uint32_t>(vocab));
      INFO("V " << vocab << " seed " << seed << " nodes " << n);
      const sp::PhiloxUniforms u{seed, 3, 5u * seed};
      std::vector<float> scratch(vocab);
      const sp::TreeVerifyOutcome host = sp::verify_tree_row(
          t.p.data(), static_cast<const float*>(nullptr), t.tokens.data(), t.parents.data(), n,
          vocab, sp::TreeProposal::point_mass, u, scratch.data());
      REQUIRE(host.error == VerifyError::none);
      check_same_outcome(run_tree_kernel(t.p, false, t, vocab, seed, 5u * seed), host);
      // How the round ended, to see that the branch paths were exercised.
      if (host.depth > 0 && host.node != 1) {
        const auto parent = static_cast<std::size_t>(t.parents[host.node]);
        second_child_accepted += host.node > parent + 1;  // an earlier sibling was tried first
      }
      std::size_t children = 0;
      for (std::size_t i = 1; i < n; ++i)
        children += t.parents[i] == static_cast<std::int32_t>(host.node);
      residual_after_siblings += children >= 2;

      const sp::TreeVerifyOutcome greedy =
          sp::verify_tree_greedy_loop(t.logits.data(), t.tokens.data(), t.parents.data(), n, vocab,
                                      sp::SerialGreedyScan<float>{vocab, true});
      check_same_outcome(run_tree_kernel(t.logits, true, t, vocab, 0, 0), greedy);
    }
  }
  CHECK(residual_after_siblings > 0);
  CHECK(second_child_accepted + residual_after_siblings > 4);

  // Errors: a NaN in a row the rule reads in full, and a parent that is not earlier.
  Tree t = make_tree(6, 300, 99);
  t.parents = {-1, 0, 0, 0, 1, 1};
  t.tokens[1] = 1, t.tokens[2] = 2, t.tokens[3] = 3;
  for (std::size_t j = 0; j < 300; ++j) t.p[j] = j < 3 ? 0.0f : 1.0f / 297;  // rejects 1, 2, 3
  t.p[200] = NAN;
  std::vector<float> scratch(300);
  const sp::TreeVerifyOutcome host = sp::verify_tree_row(
      t.p.data(), static_cast<const float*>(nullptr), t.tokens.data(), t.parents.data(), 6, 300,
      sp::TreeProposal::point_mass, sp::PhiloxUniforms{1, 3, 0}, scratch.data());
  REQUIRE(host.error != VerifyError::none);
  check_same_outcome(run_tree_kernel(t.p, false, t, 300, 1, 0), host);
  t.parents[4] = 4;
  const sp::TreeVerifyOutcome bad_parent =
      sp::verify_tree_greedy_loop(t.logits.data(), t.tokens.data(), t.parents.data(), 6, 300,
                                  sp::SerialGreedyScan<float>{300, true});
  REQUIRE(bad_parent.tree_error == sp::TreeError::parent_not_earlier);
  check_same_outcome(run_tree_kernel(t.logits, true, t, 300, 0, 0), bad_parent);
}
