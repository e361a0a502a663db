// describe_model: the report `specdec info` prints.
#include <algorithm>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/model/loader.hpp"

namespace specdec {

namespace {

std::string human_bytes(std::uint64_t n) {
  if (n >= (std::uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", static_cast<double>(n) / (1 << 30));
  if (n >= (std::uint64_t{1} << 20))
    return fmt::format("{:.2f} MiB", static_cast<double>(n) / (1 << 20));
  if (n >= (std::uint64_t{1} << 10))
    return fmt::format("{:.1f} KiB", static_cast<double>(n) / (1 << 10));
  return fmt::format("{} B", n);
}

std::string rope_scaling_string(const ModelConfig& c) {
  if (c.rope_freq_factors) return "per-frequency factors (rope_freqs.weight)";
  const RopeScaling& s = c.rope_scaling;
  switch (s.kind) {
    case RopeScaling::Kind::none:
      return "none";
    case RopeScaling::Kind::linear:
      return fmt::format("linear, factor {}", s.factor);
    case RopeScaling::Kind::llama3:
      return fmt::format("llama3, factor {}, low/high freq factors {}/{}, original context {}",
                         s.factor, s.low_freq_factor, s.high_freq_factor,
                         s.original_context_length);
  }
  return "?";
}

std::string token_string(token_t id) { return id < 0 ? std::string("none") : std::to_string(id); }

/// "blk.2.x" before "blk.10.x": digit runs compare as numbers (by length, then digits).
bool natural_less(std::string_view a, std::string_view b) {
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t i_end = i, j_end = j;
      while (i_end < a.size() && is_digit(a[i_end])) ++i_end;
      while (j_end < b.size() && is_digit(b[j_end])) ++j_end;
      const auto da = a.substr(i, i_end - i), db = b.substr(j, j_end - j);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace

std::string describe_model(const LoadedModel& m) {
  const ModelConfig& c = m.config;
  std::string out;
  auto line = [&](std::string_view label, const std::string& value) {
    out += fmt::format("{:<15}{}\n", label, value);
  };
  line("source", m.source);
  line("format", m.format);
  if (!m.name.empty()) line("name", m.name);
  line("architecture", c.architecture);
  line("vocabulary", std::to_string(c.vocab_size));
  line("layers", std::to_string(c.n_layers));
  line("embedding", std::to_string(c.dim));
  line("attention",
       fmt::format("{} heads, {} KV heads, head dim {}{}{}", c.n_heads, c.n_kv_heads, c.head_dim,
                   c.qkv_bias ? ", q/k/v bias" : "", c.qk_norm ? ", q/k RMSNorm" : ""));
  line("ffn", fmt::format("SwiGLU, hidden {}", c.ffn_dim));
  line("context", std::to_string(c.context_length));
  line("rope", fmt::format("theta {}, {} layout, scaling: {}", c.rope_theta,
                           rope_layout_name(c.rope_layout), rope_scaling_string(c)));
  line("rms norm eps", fmt::format("{}", c.rms_norm_eps));
  line("output head", c.tied_embeddings ? "tied to token_embd" : "output.weight");
  line("special ids", fmt::format("bos {}, eos {}, unk {}, pad {}", token_string(c.bos_token),
                                  token_string(c.eos_token), token_string(c.unk_token),
                                  token_string(c.pad_token)));
  line("tokenizer", m.tokenizer ? m.tokenizer->summary() : std::string("none in the files"));

  if (m.weights) {
    const auto& tensors = m.weights->tensors();
    std::uint64_t elements = 0;
    for (const auto& [name, t] : tensors) elements += t.elements();
    out += fmt::format("\ntensors: {}, {} parameters, {}\n", tensors.size(), elements,
                       human_bytes(m.weights->total_bytes()));
    std::vector<const Tensor*> ordered;
    std::size_t width = 4;
    for (const auto& [name, t] : tensors) {
      ordered.push_back(&t);
      width = std::max(width, name.size());
    }
    std::sort(ordered.begin(), ordered.end(),
              [](const Tensor* a, const Tensor* b) { return natural_less(a->name, b->name); });
    out +=
        fmt::format("  {:<{}}  {:<5}  {:<14}  {:>12}\n", "name", width, "dtype", "shape", "bytes");
    for (const Tensor* t : ordered)
      out += fmt::format("  {:<{}}  {:<5}  {:<14}  {:>12}\n", t->name, width, dtype_name(t->dtype),
                         fmt::format("[{}]", fmt::join(t->shape, ", ")), t->nbytes);
  }
  return out;
}

}  // namespace specdec
