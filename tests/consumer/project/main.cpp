// A program outside the specdec tree, built against the installed package: it links the
// compiled library (version check) and uses the header-only sampling core (one verify step).
#include <cstdio>
#include <cstring>
#include <vector>

#include <specdec/sampling/verify.hpp>
#include <specdec/version.hpp>

int main() {
  if (std::strcmp(specdec::version_string(), SPECDEC_VERSION_STRING) != 0) {
    std::printf("header/library version mismatch\n");
    return 1;
  }

  // The worked example of docs/math.md: target p_0 = [0.6, 0.3, 0.1], draft q_0 = [0.4, 0.4, 0.2],
  // drafted token 1 (accepted with probability 0.75), then a bonus row p_1.
  const std::vector<float> p{0.6f, 0.3f, 0.1f, 0.2f, 0.3f, 0.5f};  // (k+1) x V
  const std::vector<float> q{0.4f, 0.4f, 0.2f};                    // k x V
  const std::vector<specdec::token_t> draft{1};
  specdec::sampling::PhiloxStream rng{/*seed=*/42, /*stream=*/0};
  int accepted = 0;
  for (int round = 0; round < 1000; ++round) {
    const auto r = specdec::sampling::verify_chain<float>(p, q, draft, 3, rng);
    if (r.accepted > 1 || r.next < 0 || r.next > 2 || (r.accepted == 0 && r.next != 0)) {
      std::printf("verify_chain returned an impossible outcome\n");
      return 1;
    }
    accepted += static_cast<int>(r.accepted);
  }
  if (rng.counter() != 2000) {
    std::printf("the RNG counter did not advance by k + 1 per call\n");
    return 1;
  }
  std::printf("consumer linked specdec %s; verify_chain accepted %d of 1000 drafts (expect ~750)\n",
              specdec::version_string(), accepted);
  return 0;
}
