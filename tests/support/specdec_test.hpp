#pragma once
// The one place tests include Catch2 from, so that moving from Catch2 v2 (Debian) to v3 is a
// change here only: v3 would include <catch2/catch_test_macros.hpp> and friends.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace specdec::test {

/// ../shared/models/tinyllama-pair, or an empty path when it is not there (tests SKIP then).
inline std::filesystem::path tinyllama_pair() {
  std::filesystem::path p = std::filesystem::path(SPECDEC_SHARED_MODELS) / "tinyllama-pair";
  if (const char* env = std::getenv("SPECDEC_TINYLLAMA_PAIR")) p = env;
  return std::filesystem::exists(p / "target-f32.gguf") ? p : std::filesystem::path{};
}

inline std::filesystem::path test_data() { return SPECDEC_TEST_DATA; }

/// The folder of the real models (the Qwen2.5-Coder pair): $SPECDEC_MODELS, default
/// ~/.cache/specdec-models (/work/shared/models/qwen2.5-coder/fetch.sh puts them there).
inline std::filesystem::path real_models() {
  if (const char* env = std::getenv("SPECDEC_MODELS"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home != nullptr ? home : "") / ".cache" / "specdec-models";
}

}  // namespace specdec::test
