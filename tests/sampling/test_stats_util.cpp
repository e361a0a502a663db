// The statistics helpers the statistical tests rely on, checked against closed forms.
#include <cmath>
#include <vector>

#include "sampling_test_util.hpp"
#include "specdec_test.hpp"

using specdec::test::gamma_q;

TEST_CASE("gamma_q matches closed forms", "[stats]") {
  for (const double x : {1e-3, 0.1, 0.5, 1.0, 2.5, 7.0, 20.0, 60.0}) {
    INFO("x = " << x);
    // a = 1: Q(1, x) = e^-x (the chi-square survival function with 2 degrees of freedom).
    CHECK(gamma_q(1.0, x) == Approx(std::exp(-x)).epsilon(1e-12).margin(1e-300));
    // a = 1/2: Q(1/2, x) = erfc(sqrt(x)) (1 degree of freedom).
    CHECK(gamma_q(0.5, x) == Approx(std::erfc(std::sqrt(x))).epsilon(1e-10).margin(1e-300));
    // integer a = n: Q(n, x) = e^-x sum_{j<n} x^j / j!.
    for (const int n : {2, 5, 12}) {
      double term = 1.0;
      double sum = 0.0;
      for (int j = 0; j < n; ++j) {
        sum += term;
        term *= x / (j + 1);
      }
      CHECK(gamma_q(n, x) == Approx(std::exp(-x) * sum).epsilon(1e-10).margin(1e-300));
    }
  }
}

TEST_CASE("chi_square of a perfect fit and of a bad fit", "[stats]") {
  const std::vector<double> p{0.5, 0.25, 0.25, 0.0};
  const auto perfect = specdec::test::chi_square({500, 250, 250, 0}, p);
  CHECK(perfect.statistic == 0.0);
  CHECK(perfect.dof == 2);
  CHECK(perfect.p_value == Approx(1.0));
  const auto bad = specdec::test::chi_square({400, 300, 300, 1}, p);
  CHECK(bad.impossible_hits == 1);
  // n = 1001 (the impossible hit counts in n): 100.5^2/500.5 + 2 * 49.75^2/250.25 = 39.96 on
  // 2 dof, p = e^-19.98
  CHECK(bad.statistic == Approx(39.96).epsilon(1e-3));
  CHECK(bad.p_value < 1e-8);
}
