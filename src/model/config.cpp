// ModelConfig::validate: the checks every reader runs before trusting a configuration.
#include "specdec/model/config.hpp"

#include <cmath>

#include <fmt/format.h>

namespace specdec {

const char* rope_layout_name(RopeLayout layout) noexcept {
  return layout == RopeLayout::adjacent_pairs ? "adjacent_pairs" : "rotate_half";
}

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error("ModelConfig: " + what); }

void require_positive(std::size_t value, const char* field) {
  if (value == 0) invalid(fmt::format("{} must be positive", field));
}

// Generous bounds: far beyond any real model, small enough that products of two of them
// (q_dim = n_heads * head_dim, vocab * dim, ...) cannot overflow 64 bits.
constexpr std::size_t kMaxWidth = std::size_t{1} << 24;  // dim, ffn_dim, head_dim, heads
constexpr std::size_t kMaxCount = std::size_t{1} << 31;  // vocab (token_t is int32), context

void require_at_most(std::size_t value, std::size_t limit, const char* field) {
  if (value > limit)
    invalid(fmt::format("{} ({}) exceeds the supported maximum {}", field, value, limit));
}

void require_token(token_t id, std::size_t vocab, const char* field) {
  if (id < -1 || (id >= 0 && static_cast<std::size_t>(id) >= vocab))
    invalid(fmt::format("{} ({}) is outside the vocabulary of {} tokens", field, id, vocab));
}

}  // namespace

void ModelConfig::validate() const {
  require_positive(vocab_size, "vocab_size");
  require_positive(dim, "dim");
  require_positive(n_layers, "n_layers");
  require_positive(n_heads, "n_heads");
  require_positive(n_kv_heads, "n_kv_heads");
  require_positive(head_dim, "head_dim");
  require_positive(ffn_dim, "ffn_dim");
  require_positive(context_length, "context_length");
  require_at_most(vocab_size, kMaxCount - 1, "vocab_size");
  require_at_most(context_length, kMaxCount, "context_length");
  require_at_most(dim, kMaxWidth, "dim");
  require_at_most(ffn_dim, kMaxWidth, "ffn_dim");
  require_at_most(head_dim, kMaxWidth, "head_dim");
  require_at_most(n_heads, kMaxWidth, "n_heads");
  require_at_most(n_layers, std::size_t{1} << 16, "n_layers");
  if (n_kv_heads > n_heads || n_heads % n_kv_heads != 0)
    invalid(fmt::format("n_heads ({}) is not a multiple of n_kv_heads ({})", n_heads, n_kv_heads));
  require_at_most(q_dim(), kMaxWidth, "n_heads * head_dim");
  // Rotary embeddings rotate pairs of dimensions.
  if (head_dim % 2 != 0)
    invalid(fmt::format("head_dim ({}) must be even for rotary embeddings", head_dim));
  if (!std::isfinite(rope_theta) || rope_theta <= 0.0f)
    invalid(fmt::format("rope_theta ({}) must be positive", rope_theta));
  if (!std::isfinite(rms_norm_eps) || rms_norm_eps <= 0.0f)
    invalid(fmt::format("rms_norm_eps ({}) must be positive", rms_norm_eps));
  if (rope_scaling.kind != RopeScaling::Kind::none) {
    if (!std::isfinite(rope_scaling.factor) || rope_scaling.factor <= 0.0f)
      invalid(fmt::format("rope_scaling.factor ({}) must be positive", rope_scaling.factor));
  }
  if (rope_scaling.kind == RopeScaling::Kind::llama3) {
    if (!(rope_scaling.low_freq_factor > 0.0f) ||
        !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
        !std::isfinite(rope_scaling.high_freq_factor))
      invalid(
          fmt::format("llama3 rope scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({})",
                      rope_scaling.low_freq_factor, rope_scaling.high_freq_factor));
    require_positive(rope_scaling.original_context_length, "rope_scaling.original_context_length");
  }
  if (rope_freq_factors && rope_scaling.kind != RopeScaling::Kind::none)
    invalid("rope_freq_factors and rope_scaling cannot both be set");
  require_token(bos_token, vocab_size, "bos_token");
  require_token(eos_token, vocab_size, "eos_token");
  require_token(unk_token, vocab_size, "unk_token");
  require_token(pad_token, vocab_size, "pad_token");
}

}  // namespace specdec
