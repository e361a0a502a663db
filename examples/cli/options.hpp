#pragma once
// Command-line flags shared by several subcommands, with their validation.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "specdec/sampling/process.hpp"

namespace specdec::cli {

/// --top-k, --top-p, --min-p, --seed (the temperature is added by each command: generate takes
/// one, bench a list).
struct SamplingFlags {
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::uint64_t seed = 0;

  [[nodiscard]] sampling::SamplingParams params(float temperature) const {
    sampling::SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  }
};

/// The number in s, or nullopt when s is not one (validators run before CLI11's conversion).
inline std::optional<double> parse_number(const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

/// A count: a whole number >= 0 (CLI11 would otherwise wrap "-3" around to 2^64 - 3).
inline const CLI::Validator kCount(
    [](std::string& s) -> std::string {
      const auto n = parse_number(s);
      return n && *n >= 0 && std::floor(*n) == *n ? std::string()
                                                  : "must be a whole number >= 0, got " + s;
    },
    "N>=0", "count");

/// A temperature: a finite number >= 0 (0 is greedy).
inline const CLI::Validator kTemperature(
    [](std::string& s) -> std::string {
      const auto t = parse_number(s);
      return t && std::isfinite(*t) && *t >= 0 ? std::string()
                                               : "temperature must be >= 0 (0 is greedy), got " + s;
    },
    "TEMP>=0", "temperature");

inline void add_sampling_flags(CLI::App& cmd, SamplingFlags& f) {
  cmd.add_option("--top-k", f.top_k, "keep the k most likely tokens (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--top-p", f.top_p,
                 "nucleus sampling: the smallest set of tokens with this mass, in (0, 1] (1: off)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const auto p = parse_number(s);
            return p && *p > 0 && *p <= 1 ? std::string() : "top-p must be in (0, 1], got " + s;
          },
          "(0,1]", "top-p"))
      ->capture_default_str();
  cmd.add_option("--min-p", f.min_p,
                 "drop tokens below min-p x the top probability, in [0, 1] (0: off)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "random seed (Philox); runs are reproducible from it")
      ->capture_default_str();
}

inline void add_threads_flag(CLI::App& cmd, std::size_t& threads) {
  cmd.add_option("--threads", threads, "CPU threads per model (0: one per physical core)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1024}))
      ->capture_default_str();
}

}  // namespace specdec::cli
