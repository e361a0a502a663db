#pragma once
// The real Qwen2.5-Coder instruct pair (official Q4_K_M GGUF files) in $SPECDEC_MODELS (default
// ~/.cache/specdec-models), and the SKIPs of the tests that need it.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "specdec_test.hpp"

namespace specdec::test {

inline const char* const kSizes[] = {"0.5b", "1.5b"};

inline std::filesystem::path official(const char* size) {
  return real_models() / fmt::format("qwen2.5-coder-{}-instruct-q4_k_m.gguf", size);
}

/// SKIPs the test (exit code 77) under AddressSanitizer: a 1.5B forward there takes minutes and
/// the sanitised paths are the ones the tinyllama and random-model tests already cover.
inline void skip_under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__)
  std::cout << "SKIPPED: the Qwen forwards run in the release build only (AddressSanitizer)\n";
  std::fflush(stdout);
  std::exit(77);
#endif
}

/// SKIPs the whole test (exit code 77) when the official files are not there.
inline void require_models() {
  for (const char* size : kSizes)
    if (!std::filesystem::exists(official(size))) {
      std::cout << "SKIPPED: " << official(size)
                << " is absent (set SPECDEC_MODELS; /work/shared/models/qwen2.5-coder/fetch.sh)\n";
      std::fflush(stdout);
      std::exit(77);
    }
}

}  // namespace specdec::test
