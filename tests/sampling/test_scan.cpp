// The blocked inverse-CDF scan of verify.hpp: the vectorised and scalar lane orders agree bit for
// bit (so a CUDA kernel following the scalar order reproduces the host), pass 1's totals are
// exactly pass 2's block sums, and the scan returns the token a plain sequential inverse CDF does.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec/sampling/verify.hpp"
#include "specdec_test.hpp"

namespace sd = specdec::sampling::detail;
using specdec::token_t;

namespace {

template <class Real>
std::vector<Real> random_row(std::mt19937_64& gen, std::size_t n, bool with_negatives) {
  std::uniform_real_distribution<double> uni(with_negatives ? -0.5 : 0.0, 1.0);
  std::bernoulli_distribution zero(0.2);
  std::vector<Real> r(n);
  for (Real& x : r) x = zero(gen) ? Real(0) : static_cast<Real>(uni(gen) * 1e-3);
  return r;
}

/// Total of w over the row in pass 1's order: block sums (in Real) added into a double.
template <class Real, class Weights>
double blocked_total(const Weights& w, std::size_t vocab) {
  double total = 0;
  for (std::size_t b = 0; b < vocab; b += specdec::sampling::kScanBlock) {
    total += static_cast<double>(sd::block_sum<Real>(w, b, sd::block_end(b, vocab)));
  }
  return total;
}

template <class Real>
void check_lane_orders() {
  std::mt19937_64 gen(sizeof(Real));
  for (const std::size_t n : {8u, 16u, 64u, 256u, 1024u}) {
    const auto p = random_row<Real>(gen, n, true);
    const auto q = random_row<Real>(gen, n, true);
    const auto check = [&](const auto& w) {
#if SPECDEC_SAMPLING_SIMD
      CHECK(sd::block_sum_simd<Real>(w, 0, n) == sd::block_sum_scalar<Real>(w, 0, n));
#endif
      CHECK(sd::block_sum<Real>(w, 0, n) == sd::block_sum_scalar<Real>(w, 0, n));
    };
    check(sd::PlainWeights<Real>{p.data()});
    check(sd::ResidualWeights<Real>{p.data(), q.data()});
    for (const std::size_t x : {std::size_t{0}, n / 3, n - 1, n + 5}) {
      check(sd::ExcludeOneWeights<Real>{p.data(), x});
    }
  }
}

template <class Real>
void check_pass1_totals() {
  std::mt19937_64 gen(7 + sizeof(Real));
  for (const std::size_t vocab : {1u, 7u, 255u, 256u, 257u, 1000u, 4099u}) {
    const auto p = random_row<Real>(gen, vocab, false);
    const auto q = random_row<Real>(gen, vocab, false);
    sd::RowStats ps;
    sd::RowStats qs;
    CHECK(sd::plain_total(p.data(), vocab, ps) ==
          blocked_total<Real>(sd::PlainWeights<Real>{p.data()}, vocab));
    CHECK(sd::residual_total(p.data(), q.data(), vocab, ps, qs) ==
          blocked_total<Real>(sd::ResidualWeights<Real>{p.data(), q.data()}, vocab));
    CHECK(ps.sum == blocked_total<Real>(sd::PlainWeights<Real>{p.data()}, vocab));
    CHECK(qs.sum == blocked_total<Real>(sd::PlainWeights<Real>{q.data()}, vocab));
    CHECK_FALSE(ps.negative);
    CHECK_FALSE(qs.negative);
    const std::size_t x = vocab / 2;
    CHECK(sd::exclude_one_total(p.data(), vocab, x) ==
          blocked_total<Real>(sd::ExcludeOneWeights<Real>{p.data(), x}, vocab));

    // A single negative entry anywhere is seen, in full and partial blocks alike.
    for (const std::size_t at : {std::size_t{0}, vocab / 2, vocab - 1}) {
      auto neg = p;
      neg[at] = Real(-1e-30);
      sd::plain_total(neg.data(), vocab, ps);
      CHECK(ps.negative);
      sd::residual_total(p.data(), neg.data(), vocab, ps, qs);
      CHECK(qs.negative);
      CHECK_FALSE(ps.negative);
    }
  }
}

}  // namespace

TEST_CASE("SIMD and scalar lane orders give bit-identical sums", "[scan]") {
  check_lane_orders<float>();
  check_lane_orders<double>();
}

TEST_CASE("pass 1 totals equal the sums of pass 2's block sums exactly", "[scan]") {
  check_pass1_totals<float>();
  check_pass1_totals<double>();
}

TEST_CASE("the blocked scan returns the token of a sequential inverse CDF", "[scan]") {
  // For u at the midpoint of each token's CDF interval (computed sequentially in long double),
  // the blocked scan must return that token: the block structure never moves a boundary by more
  // than rounding. Rows of several blocks, with zeros, including whole zero blocks.
  std::mt19937_64 gen(11);
  for (const std::size_t vocab : {1u, 5u, 256u, 300u, 1500u}) {
    auto p = random_row<double>(gen, vocab, false);
    if (vocab > 600) std::fill(p.begin() + 256, p.begin() + 512, 0.0);  // an empty block
    if (std::all_of(p.begin(), p.end(), [](double x) { return x == 0; })) p[0] = 1;
    long double total = 0;
    for (const double x : p) total += x;
    long double cum = 0;
    for (std::size_t y = 0; y < vocab; ++y) {
      if (p[y] == 0) continue;
      const double u = static_cast<double>((cum + 0.5L * p[y]) / total);
      cum += p[y];
      const double pass1 = blocked_total<double>(sd::PlainWeights<double>{p.data()}, vocab);
      CHECK(sd::inverse_cdf<double>(sd::PlainWeights<double>{p.data()}, vocab, pass1, u) ==
            static_cast<token_t>(y));
    }
  }
}
