// The CPU Transformer: embedding -> n_layers x (attention block, SwiGLU block) -> norm -> head.
//
// One forward step over n tokens runs, per layer, five parallel operations on the thread pool:
//   1. q, k, v projections, one task per attention head (its rows of W_q, W_k or W_v), which
//      also adds the bias, applies the q/k norm and the rotary embedding to its head and stores
//      k and v in the KV cache;
//   2. attention, one task per (token, head);
//   3. output projection + residual, tasks over row ranges of W_o;
//   4. gate and up projections + SwiGLU, tasks over row ranges of the FFN;
//   5. down projection + residual, tasks over row ranges of W_down;
// and the RMSNorms and activation packing between them on the calling thread (they are small).
// Tasks never split a dot product, and every kernel's reduction order is fixed (kernels.hpp), so
// the results do not depend on n, on the thread count or on which thread ran what.
//
// A step may carry the tokens of several sequences (forward_batch: one Transformer per sequence,
// all over the same weights): the matrix products run over all their rows at once, while the
// rotary angles, the KV cache writes and the attention of each row use its own sequence's
// position and cache. Since no row's result depends on the other rows, each sequence gets
// bitwise the logits it would get alone.
#include "specdec/cpu/transformer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <numbers>
#include <string>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/thread_pool.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec/model/rope.hpp"
#include "specdec/model/token_tree.hpp"

namespace specdec::cpu {

namespace {

/// Tokens processed together through the whole network; longer inputs are split into steps of
/// this size (which changes nothing in the results, only the size of the activation buffers).
constexpr std::size_t max_step_tokens = 256;

/// A weight matrix, bound through the schema (name and shape); `multiplied` when matmul() reads
/// it (the embedding table is only looked up, which works for every type).
MatrixRef load_matrix(const WeightStore& weights, const ModelConfig& config, LlamaTensor id,
                      std::size_t layer = 0, bool multiplied = true) {
  const Tensor& t = llama_weight(weights, config, id, layer);
  if (multiplied && !has_matmul_kernel(t.dtype))
    throw Error(fmt::format("tensor {} is {}, which the CPU backend cannot multiply yet", t.name,
                            dtype_name(t.dtype)));
  return MatrixRef::of(t);
}

/// HF's RMSNorm: y = (x * (1 / sqrt(mean(x^2) + eps))) * w, in float.
void rms_norm(Isa isa, const float* x, const float* w, float* y, std::size_t dim, float eps) {
  const float mean = sum_squares(isa, x, dim) / static_cast<float>(dim);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (std::size_t i = 0; i < dim; ++i) y[i] = (x[i] * scale) * w[i];
}

/// Rotates one head in place: pairs (x[2i], x[2i+1]) or (x[i], x[i + d/2]) by angle i.
void apply_rope(RopeLayout layout, float* x, const float* cos, const float* sin,
                std::size_t head_dim) {
  const std::size_t half = head_dim / 2;
  for (std::size_t i = 0; i < half; ++i) {
    float& a = layout == RopeLayout::adjacent_pairs ? x[2 * i] : x[i];
    float& b = layout == RopeLayout::adjacent_pairs ? x[2 * i + 1] : x[i + half];
    const float a0 = a, b0 = b;
    a = a0 * cos[i] - b0 * sin[i];
    b = b0 * cos[i] + a0 * sin[i];
  }
}

std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

/// SPECDEC_REPACK=0 turns Options::repack_weights off for every Transformer (to compare layouts
/// from the command line); any other value, or none, leaves it as set.
bool repack_disabled_by_environment() {
  const char* v = std::getenv("SPECDEC_REPACK");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

/// a x b, or a specdec::Error naming `what` when it does not fit in size_t (a config claiming an
/// absurd context must give a message, not a wrapped-around size).
std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw Error(
        fmt::format("cpu::Transformer: the {} overflows (a product of {} and {})", what, a, b));
  return out;
}

}  // namespace

MemoryEstimate Transformer::estimate_memory(const ModelConfig& c, const Options& options) {
  MemoryEstimate e;
  e.context_length = options.context_length != 0 ? options.context_length : c.context_length;
  e.threads = options.threads != 0 ? options.threads : physical_cores();
  const std::size_t element = kv_type_bytes(options.kv_type);
  std::size_t kv = checked_mul(c.n_layers, 2 * c.n_kv_heads, "KV cache size");
  kv = checked_mul(kv, e.context_length, "KV cache size");
  kv = checked_mul(kv, c.head_dim, "KV cache size");
  e.kv_cache_bytes = checked_mul(kv, element, "KV cache size");
  // Per thread: the scores of one group of query heads (those sharing a K/V head).
  const std::size_t group = c.n_kv_heads != 0 ? c.n_heads / c.n_kv_heads : 1;
  e.scratch_floats_per_thread = checked_mul(group, e.context_length, "attention scratch size");
  e.scratch_bytes = checked_mul(
      e.threads, checked_mul(e.scratch_floats_per_thread, sizeof(float), "attention scratch size"),
      "attention scratch size");
  if (e.kv_cache_bytes + e.scratch_bytes < e.kv_cache_bytes)
    throw Error("cpu::Transformer: the memory estimate overflows");
  return e;
}

// ================================================================================================

/// A repacked copy of a WeightStore's multiplied matrices (Transformer::repack): one buffer
/// (huge pages) and the matrices that point into it, in repack()'s order (those without a
/// repacked layout as they were).
struct RepackedWeights {
  WeightBuffer buffer;
  std::vector<MatrixRef> matrices;
};

/// What makes two Transformers' repacked copies the same: the store, the kernels' Isa and the
/// head's rows.
struct RepackKey {
  const WeightStore* store;
  Isa isa;
  std::vector<token_t> head_ids;
  bool operator==(const RepackKey&) const = default;
};

/// The live repacked copies, so that Transformers over one store share theirs (a server's slots
/// would otherwise each hold a copy of the model). Weak references: a copy lives while a
/// Transformer uses it, and a Transformer never outlives its store, so a live entry's store is the
/// one its address names. make() runs under the lock: a second Transformer of the same model
/// waits for the first one's copy instead of making its own.
template <class Make>
std::shared_ptr<const RepackedWeights> shared_repacked(const RepackKey& key, Make&& make) {
  static std::mutex mutex;
  static std::vector<std::pair<RepackKey, std::weak_ptr<const RepackedWeights>>> live;
  const std::lock_guard lock(mutex);
  std::erase_if(live, [](const auto& entry) { return entry.second.expired(); });
  for (const auto& [k, copy] : live)
    if (k == key)
      if (auto shared = copy.lock()) return shared;
  std::shared_ptr<const RepackedWeights> made = make();
  live.emplace_back(key, made);
  return made;
}

struct LayerWeights {
  MatrixRef q, k, v, o, gate, up, down;
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // empty without qkv_bias
  std::vector<float> q_norm, k_norm;          // empty without qk_norm
};

struct Transformer::State {
  Isa isa = Isa::portable;
  std::shared_ptr<ThreadPool> pool;
  MatrixRef embed, output;
  std::vector<float> output_norm;
  // A restricted head (Options::head_tokens): its rows [N][dim], in place for a prefix of the
  // vocabulary, else copied into head_rows; head_out [n][N] holds a step's logits before they
  // are scattered into the full rows (kMaskedLogit elsewhere). head_ids empty: the whole head.
  std::vector<token_t> head_ids;
  MatrixRef head;
  std::vector<std::byte> head_rows;  // [N][row bytes], only for a list that is not a prefix
  std::vector<float> head_out;       // [n][N]
  std::vector<LayerWeights> layers;
  // The repacked copy the MatrixRefs above point into (Options::repack_weights), maybe shared.
  std::shared_ptr<const RepackedWeights> repacked;
  double repack_seconds = 0;
  std::vector<float> inv_freq;
  float attn_scale = 1.0f;

  // KV cache: per layer, K then V, each [n_kv_heads][context][head_dim], f32 or f16. Allocated
  // uninitialised: pages become resident only as positions are written.
  std::unique_ptr<float[]> kv_f32;
  std::unique_ptr<std::uint16_t[]> kv_f16;
  std::size_t head_stride = 0;   // context * head_dim
  std::size_t layer_stride = 0;  // 2 * n_kv_heads * head_stride (K and V)

  // Activations of one step of n tokens, row-major [n][width].
  std::vector<float> x, xn, q, k, v, attn, proj, gate, up, hidden;
  std::vector<float> rope_cos, rope_sin;  // [n][head_dim / 2]
  std::vector<float> logits;              // [tokens of the call][vocab]
  std::vector<float> batch_logits;        // [n][vocab]: a step of several segments
  // Row t of the current step: its segment, its position in that segment's sequence (rotary
  // angle, causal extent) and the cache slot its K/V go to. The slot is the position, except in
  // a token tree, where node j of a tree after c cached positions has slot c + j and position
  // c + its depth.
  std::vector<std::size_t> row_segment, row_position, row_slot;  // [n]
  // A tree node's attention reads its ancestors' slots, root first, then its own
  // (AttentionArgs::listed): row t's list starts at tree_rows[row_listed[t]]; no_list for a row
  // of a chain.
  static constexpr std::size_t no_list = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> row_listed;                // [n]
  std::vector<std::size_t> tree_rows;                 // the lists, one after the other
  std::vector<std::int32_t> tree_parents;             // extend_tree's whole tree, being built
  std::array<PackedInput, input_format_count> packs;  // the current input, per InputFormat
  std::vector<std::vector<float>>
      scratch;  // per thread: attention scores [heads per K/V head][context]

  // Whether the current step hands tasks to the pool's workers, chosen per kind of step from
  // measured times (ParallelismChooser): steps of 1, 2-4, 5-8 and 9-16 tokens. Longer steps
  // (prefill) always use the workers.
  bool use_workers = true;
  bool adaptive_threads = true;
  std::array<ParallelismChooser, 4> choosers;
  static std::size_t chooser_index(std::size_t n) {
    return n <= 1 ? 0 : n <= 4 ? 1 : n <= 8 ? 2 : 3;
  }

  [[nodiscard]] std::size_t kv_offset(std::size_t layer, bool value, std::size_t head,
                                      std::size_t pos, std::size_t head_dim) const {
    return layer * layer_stride + (value ? layer_stride / 2 : 0) + head * head_stride +
           pos * head_dim;
  }

  /// Packs `x` [n][cols] for each distinct input format the matrices need. Several tokens are
  /// packed by the pool, in column ranges.
  void pack(const float* in, std::size_t n, std::size_t cols,
            std::initializer_list<const MatrixRef*> ms) {
    std::array<bool, input_format_count> done{};
    for (const MatrixRef* m : ms) {
      const auto f = static_cast<std::size_t>(input_format(isa, m->dtype, cols));
      if (done[f]) continue;
      done[f] = true;
      PackedInput& p = packs[f];
      p.prepare(isa, m->dtype, n, cols);
      const std::size_t granule = p.column_granule();
      // About 4096 values per task; one task (on this thread) for a single token.
      const std::size_t per_task =
          n < 2 ? cols : round_up(std::max<std::size_t>(granule, 4096 / n), granule);
      const std::size_t tasks = (cols + per_task - 1) / per_task;
      pool->run(
          tasks,
          [&](std::size_t task, std::size_t) {
            p.pack_columns(in, cols, task * per_task, std::min(cols, (task + 1) * per_task));
          },
          use_workers);
    }
  }
  const PackedInput& packed(const MatrixRef& m) const {
    return packs[static_cast<std::size_t>(input_format(isa, m.dtype, m.cols))];
  }
};

Transformer::Transformer(const LoadedModel& model, const Options& options)
    : Transformer(model.config, model.weights, options) {}

Transformer::Transformer(const ModelConfig& config, std::shared_ptr<const WeightStore> weights,
                         const Options& options)
    : config_(config),
      weights_(std::move(weights)),
      options_(options),
      state_(std::make_unique<State>()) {
  config_.validate();
  if (!weights_) throw Error("cpu::Transformer: no weights");
  const ModelConfig& c = config_;
  const WeightStore& w = *weights_;
  if (c.rope_layout != RopeLayout::adjacent_pairs && c.rope_layout != RopeLayout::rotate_half)
    throw Error("cpu::Transformer: unknown rope layout");
  if (c.head_dim % 2 != 0)
    throw Error(fmt::format("cpu::Transformer: head_dim {} is odd", c.head_dim));
  context_length_ = options.context_length != 0 ? options.context_length : c.context_length;
  if (context_length_ == 0)
    throw Error("cpu::Transformer: context length is 0 (set Options::context_length)");
  // The KV cache is allocated whole, here: check that it fits before asking for it, so that a
  // model claiming a long context gets a message with the numbers instead of std::bad_alloc (or
  // an overcommitted allocation that the OOM killer collects later).
  const MemoryEstimate need = estimate_memory(c, options);
  if (const auto available = available_memory(); available && need.total() > available->bytes)
    throw Error(fmt::format(
        "cpu::Transformer: a context of {} positions needs {} of memory (KV cache {}: {} layers x "
        "2 x {} KV heads x {} positions x head dim {} x {} bytes; attention scratch {}) but {} "
        "allows {}: set a shorter context (Options::context_length){}",
        need.context_length, format_bytes(need.total()), format_bytes(need.kv_cache_bytes),
        c.n_layers, c.n_kv_heads, need.context_length, c.head_dim, kv_type_bytes(options.kv_type),
        format_bytes(need.scratch_bytes), available->limit, format_bytes(available->bytes),
        options.kv_type == KvType::f16 ? "" : " or an f16 KV cache (Options::kv_type)"));

  State& s = *state_;
  s.isa = default_isa();
  s.pool = ThreadPool::shared(options.threads != 0 ? options.threads : physical_cores());
  s.adaptive_threads = options.adaptive_threads;

  using enum LlamaTensor;
  const bool tied = !is_present(output, c);
  s.embed = load_matrix(w, c, token_embd, 0, /*multiplied=*/tied);
  s.output = tied ? s.embed : load_matrix(w, c, output);
  s.output_norm = llama_vector(w, c, output_norm);
  if (!options.head_tokens.empty()) {
    const std::vector<token_t>& ids = options.head_tokens;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= c.vocab_size)
        throw Error(fmt::format(
            "cpu::Transformer: Options::head_tokens[{}] = {} is outside the vocabulary [0, {})", i,
            ids[i], c.vocab_size));
      if (i > 0 && ids[i] <= ids[i - 1])
        throw Error(fmt::format(
            "cpu::Transformer: Options::head_tokens must be ascending without repeats ({} at {} "
            "follows {})",
            ids[i], i, ids[i - 1]));
    }
    s.head_ids = ids;
    s.head = s.output;
    s.head.rows = ids.size();
    if (static_cast<std::size_t>(ids.back()) + 1 != ids.size()) {  // not 0 .. N-1: gather
      s.head_rows.resize(ids.size() * s.output.row_bytes);
      for (std::size_t i = 0; i < ids.size(); ++i)
        std::copy_n(s.output.data + static_cast<std::size_t>(ids[i]) * s.output.row_bytes,
                    s.output.row_bytes, s.head_rows.data() + i * s.output.row_bytes);
      s.head.data = s.head_rows.data();
    }
  }
  s.layers.resize(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = s.layers[i];
    l.q = load_matrix(w, c, attn_q, i);
    l.k = load_matrix(w, c, attn_k, i);
    l.v = load_matrix(w, c, attn_v, i);
    l.o = load_matrix(w, c, attn_output, i);
    l.gate = load_matrix(w, c, ffn_gate, i);
    l.up = load_matrix(w, c, ffn_up, i);
    l.down = load_matrix(w, c, ffn_down, i);
    l.attn_norm = llama_vector(w, c, attn_norm, i);
    l.ffn_norm = llama_vector(w, c, ffn_norm, i);
    if (is_present(attn_q_bias, c)) {
      l.q_bias = llama_vector(w, c, attn_q_bias, i);
      l.k_bias = llama_vector(w, c, attn_k_bias, i);
      l.v_bias = llama_vector(w, c, attn_v_bias, i);
    }
    if (is_present(attn_q_norm, c)) {
      l.q_norm = llama_vector(w, c, attn_q_norm, i);
      l.k_norm = llama_vector(w, c, attn_k_norm, i);
    }
  }
  // An embedding that is not also the head is only looked up, a row per token, but loading read
  // all of it (the loader's checks): its pages are released (Qwen2.5-Coder 1.5B: 137 MB less
  // resident), and look-ups fault back the rows they read.
  if (!tied) w.release(s.embed.data, s.embed.rows * s.embed.row_bytes);
  if (options.repack_weights && !repack_disabled_by_environment()) repack(w);
  s.inv_freq = rope_inv_freq(c, w);
  s.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));

  s.head_stride = context_length_ * c.head_dim;
  s.layer_stride = 2 * c.n_kv_heads * s.head_stride;
  const std::size_t kv_elements = c.n_layers * s.layer_stride;
  try {
    if (options.kv_type == KvType::f16)
      s.kv_f16 = std::make_unique_for_overwrite<std::uint16_t[]>(kv_elements);
    else
      s.kv_f32 = std::make_unique_for_overwrite<float[]>(kv_elements);
    s.scratch.assign(s.pool->size(), std::vector<float>(need.scratch_floats_per_thread));
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format(
        "cpu::Transformer: cannot allocate {} for a context of {} positions: set a shorter "
        "context (Options::context_length)",
        format_bytes(need.total()), context_length_));
  }
}

std::vector<token_t> first_tokens(std::size_t n) {
  std::vector<token_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<token_t>(i);
  return ids;
}

Transformer::~Transformer() = default;
Transformer::Transformer(Transformer&&) noexcept = default;
Transformer& Transformer::operator=(Transformer&&) noexcept = default;

std::size_t Transformer::threads() const noexcept { return state_->pool->size(); }
std::size_t Transformer::repacked_bytes() const noexcept {
  return state_->repacked ? state_->repacked->buffer.size() : 0;
}
double Transformer::repack_seconds() const noexcept { return state_->repack_seconds; }
const std::byte* Transformer::repacked_weights() const noexcept {
  return state_->repacked ? state_->repacked->buffer.data() : nullptr;
}

void Transformer::repack(const WeightStore& w) {
  State& s = *state_;
  const auto start = std::chrono::steady_clock::now();
  // Every matrix the forward multiplies: the layers', and the head (restricted or whole; with a
  // tied embedding the look-ups keep reading the map).
  std::vector<MatrixRef*> matrices;
  for (LayerWeights& l : s.layers)
    for (MatrixRef* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) matrices.push_back(m);
  matrices.push_back(s.head_ids.empty() ? &s.output : &s.head);
  // One buffer for all of them (huge pages), each copy at a 4 KiB boundary.
  std::vector<std::size_t> offsets(matrices.size() + 1, 0);
  for (std::size_t i = 0; i < matrices.size(); ++i)
    offsets[i + 1] = offsets[i] + round_up(cpu::repacked_bytes(s.isa, *matrices[i]), 4096);
  if (offsets.back() == 0) return;
  s.repacked = shared_repacked({&w, s.isa, s.head_ids}, [&] {
    auto made = std::make_shared<RepackedWeights>();
    made->buffer = WeightBuffer(offsets.back());
    made->matrices.resize(matrices.size());
    s.pool->run(matrices.size(), [&](std::size_t i, std::size_t) {
      const MatrixRef file = *matrices[i];
      if (offsets[i + 1] == offsets[i]) {
        made->matrices[i] = file;
        return;
      }
      made->matrices[i] = repack_weights(s.isa, file, made->buffer.data() + offsets[i]);
      // The copy replaces the mapped pages (a restricted head's gathered rows are not mapped).
      w.release(file.data, file.rows * file.row_bytes);
    });
    s.repack_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::shared_ptr<const RepackedWeights>(std::move(made));
  });
  for (std::size_t i = 0; i < matrices.size(); ++i) *matrices[i] = s.repacked->matrices[i];
  if (!s.head_ids.empty() && s.head.data != s.head_rows.data()) s.head_rows = {};
}

Transformer::ThreadingStats Transformer::threading_stats() const noexcept {
  ThreadingStats stats;
  for (const ParallelismChooser& c : state_->choosers) {
    stats.with_workers += c.calls(true);
    stats.alone += c.calls(false);
  }
  return stats;
}

std::size_t Transformer::scratch_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& v : state_->scratch) bytes += v.size() * sizeof(float);
  return bytes;
}

std::size_t Transformer::kv_cache_bytes() const noexcept {
  const std::size_t elements = config_.n_layers * state_->layer_stride;
  return elements * kv_type_bytes(options_.kv_type);
}

void Transformer::rollback(std::size_t n) {
  if (n > cached_)
    throw Error(
        fmt::format("cpu::Transformer::rollback({}): only {} positions are cached", n, cached_));
  cached_ = n;
  tree_parents_.clear();
}

void Transformer::check_input(std::span<const token_t> tokens, const char* who) const {
  if (tokens.empty()) throw Error(fmt::format("cpu::Transformer::{}: no tokens", who));
  if (tokens.size() > context_length_ - cached_)
    throw Error(
        fmt::format("cpu::Transformer::{}: {} cached + {} new tokens exceed the context length {}",
                    who, cached_, tokens.size(), context_length_));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= config_.vocab_size)
      throw Error(
          fmt::format("cpu::Transformer::{}: token {} (at {}) is outside the vocabulary [0, {})",
                      who, tokens[i], i, config_.vocab_size));
}

void Transformer::chosen_step(std::span<const Segment> segments, std::size_t tokens) {
  State& s = *state_;
  if (tokens > 16 || !s.adaptive_threads || s.pool->size() <= 1) {
    step(segments);
    return;
  }
  // Decode and verify steps: workers or the calling thread alone, whichever has been faster
  // lately for steps of this size (the results are the same either way).
  ParallelismChooser& chooser = s.choosers[State::chooser_index(tokens)];
  s.use_workers = chooser.use_workers();
  const auto start = std::chrono::steady_clock::now();
  step(segments);
  chooser.record(s.use_workers,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  s.use_workers = true;
}

LogitsView Transformer::forward(std::span<const token_t> tokens) {
  check_input(tokens, "forward");
  tree_parents_.clear();
  State& s = *state_;
  const ModelConfig& c = config_;
  s.logits.resize(tokens.size() * c.vocab_size);
  if (tokens.size() <= 16) {
    const Segment segment{this, tokens, s.logits.data()};
    chosen_step(std::span(&segment, 1), tokens.size());
    return LogitsView{s.logits.data(), tokens.size(), c.vocab_size, Memory::host};
  }
  for (std::size_t first = 0; first < tokens.size(); first += max_step_tokens) {
    const std::size_t n = std::min(max_step_tokens, tokens.size() - first);
    const Segment segment{this, tokens.subspan(first, n), s.logits.data() + first * c.vocab_size};
    step(std::span(&segment, 1));
  }
  return LogitsView{s.logits.data(), tokens.size(), c.vocab_size, Memory::host};
}

std::vector<LogitsView> Transformer::forward_batch(
    std::span<Transformer* const> models, std::span<const std::span<const token_t>> inputs) {
  return forward_batch(models, inputs, {});
}

std::vector<LogitsView> Transformer::forward_batch(
    std::span<Transformer* const> models, std::span<const std::span<const token_t>> inputs,
    std::span<const std::span<const std::int32_t>> trees) {
  if (!trees.empty() && trees.size() != models.size())
    throw Error(fmt::format("cpu::Transformer::forward_batch: {} models but {} trees",
                            models.size(), trees.size()));
  const auto tree_of = [&](std::size_t i) {
    return trees.empty() ? std::span<const std::int32_t>() : trees[i];
  };
  if (models.size() != inputs.size())
    throw Error(fmt::format("cpu::Transformer::forward_batch: {} models but {} inputs",
                            models.size(), inputs.size()));
  if (models.empty()) return {};
  // Everything is checked before any cache changes.
  Transformer& lead = *models[0];
  for (std::size_t i = 0; i < models.size(); ++i) {
    Transformer& m = *models[i];
    if (std::find(models.begin(), models.begin() + static_cast<std::ptrdiff_t>(i), &m) !=
        models.begin() + static_cast<std::ptrdiff_t>(i))
      throw Error(fmt::format(
          "cpu::Transformer::forward_batch: model {} appears twice (one sequence per model)", i));
    if (m.weights_ != lead.weights_)
      throw Error(fmt::format(
          "cpu::Transformer::forward_batch: model {} has other weights than model 0 (a batch "
          "shares one WeightStore)",
          i));
    if (m.state_->pool != lead.state_->pool)
      throw Error(fmt::format(
          "cpu::Transformer::forward_batch: model {} runs on {} threads, model 0 on {} (a batch "
          "shares one thread pool: give every model the same Options::threads)",
          i, m.threads(), lead.threads()));
    if (tree_of(i).empty())
      m.check_input(inputs[i], "forward_batch");
    else
      m.check_tree_input(inputs[i], tree_of(i), 0, "forward_batch");
  }

  // The segments, packed into steps of at most max_step_tokens (a long input is cut, its parts
  // going to consecutive steps: positions follow from each model's cache at its step).
  const std::size_t vocab = lead.config_.vocab_size;
  std::vector<LogitsView> out(models.size());
  for (std::size_t i = 0; i < models.size(); ++i) {
    State& m = *models[i]->state_;
    m.logits.resize(inputs[i].size() * vocab);
    out[i] = LogitsView{m.logits.data(), inputs[i].size(), vocab, Memory::host};
  }
  for (Transformer* m : models) m->tree_parents_.clear();
  std::vector<Segment> step_segments;
  std::size_t in_step = 0;
  auto run_step = [&] {
    if (step_segments.empty()) return;
    lead.chosen_step(step_segments, in_step);  // as forward(): the lead model's chooser
    step_segments.clear();
    in_step = 0;
  };
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (!tree_of(i).empty()) {  // a tree takes one step: the next one when it does not fit here
      if (in_step + inputs[i].size() > max_step_tokens) run_step();
      step_segments.push_back(
          Segment{models[i], inputs[i], models[i]->state_->logits.data(), tree_of(i), 0});
      in_step += inputs[i].size();
      continue;
    }
    for (std::size_t first = 0; first < inputs[i].size();) {
      if (in_step == max_step_tokens) run_step();
      const std::size_t n = std::min(max_step_tokens - in_step, inputs[i].size() - first);
      step_segments.push_back(Segment{models[i], inputs[i].subspan(first, n),
                                      models[i]->state_->logits.data() + first * vocab});
      in_step += n;
      first += n;
    }
  }
  run_step();
  for (std::size_t i = 0; i < models.size(); ++i)  // kept for accept_path()
    models[i]->tree_parents_.assign(tree_of(i).begin(), tree_of(i).end());
  return out;
}

LogitsView Transformer::forward_tree(std::span<const token_t> tokens,
                                     std::span<const std::int32_t> parents) {
  return score_tree(tokens, parents, 0, "forward_tree");
}

LogitsView Transformer::extend_tree(std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
  return score_tree(tokens, parents, tree_parents_.size(), "extend_tree");
}

LogitsView Transformer::score_tree(std::span<const token_t> tokens,
                                   std::span<const std::int32_t> parents, std::size_t first,
                                   const char* who) {
  // The first `first` nodes of the pending tree (tree_parents_) stay; the new ones follow them.
  // Nothing changes before every check has passed.
  check_tree_input(tokens, parents, first, who);
  State& s = *state_;
  s.logits.resize(tokens.size() * config_.vocab_size);
  std::vector<std::int32_t>& all = s.tree_parents;  // the whole tree: the earlier nodes, then these
  all.assign(tree_parents_.begin(), tree_parents_.begin() + static_cast<std::ptrdiff_t>(first));
  all.insert(all.end(), parents.begin(), parents.end());
  const Segment segment{this, tokens, s.logits.data(), all, first};
  chosen_step(std::span(&segment, 1), tokens.size());
  tree_parents_.swap(all);
  return LogitsView{s.logits.data(), tokens.size(), config_.vocab_size, Memory::host};
}

void Transformer::check_tree_input(std::span<const token_t> tokens,
                                   std::span<const std::int32_t> parents, std::size_t first,
                                   const char* who) const {
  check_input(tokens, who);
  check_tree_nodes(tokens.size(), parents, first, max_tree_nodes, cached_, context_length_,
                   std::string("cpu::Transformer::") + who);
}

void Transformer::accept_path(std::span<const std::size_t> path) {
  check_tree_path(tree_parents_, path, "cpu::Transformer::accept_path");
  // Node path[k] sits in slot cached_ + path[k] and moves to position cached_ + k. A child comes
  // after its parent, so path[k] >= k and increasing k never overwrites a row still to be moved.
  State& s = *state_;
  const ModelConfig& c = config_;
  const std::size_t hd = c.head_dim;
  for (std::size_t k = 0; k < path.size(); ++k) {
    if (path[k] == k) continue;
    for (std::size_t li = 0; li < c.n_layers; ++li)
      for (const bool value : {false, true})
        for (std::size_t head = 0; head < c.n_kv_heads; ++head) {
          const std::size_t from = s.kv_offset(li, value, head, cached_ + path[k], hd),
                            to = s.kv_offset(li, value, head, cached_ + k, hd);
          if (s.kv_f16)
            std::copy_n(s.kv_f16.get() + from, hd, s.kv_f16.get() + to);
          else
            std::copy_n(s.kv_f32.get() + from, hd, s.kv_f32.get() + to);
        }
  }
  cached_ += path.size();
  tree_parents_.clear();
}

void Transformer::step(std::span<const Segment> segments) {
  State& s = *state_;  // activations; the KV caches are each segment's model's
  const ModelConfig& c = config_;
  const std::size_t dim = c.dim, hd = c.head_dim, half = hd / 2;
  const std::size_t q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const Isa isa = s.isa;
  ThreadPool& pool = *s.pool;
  const std::size_t threads = pool.size();
  auto run = [&](std::size_t tasks, auto&& fn) { pool.run(tasks, fn, s.use_workers); };

  // Row t of the step belongs to segment row_segment[t] and sits at position row_position[t] of
  // that segment's sequence: the rows of all segments, one after the other.
  std::size_t n = 0;
  for (const Segment& seg : segments) n += seg.tokens.size();
  s.row_segment.resize(n);
  s.row_position.resize(n);
  s.row_slot.resize(n);
  s.row_listed.assign(n, State::no_list);
  s.tree_rows.clear();
  s.x.resize(n * dim);
  for (std::size_t i = 0, t = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    const std::size_t base = seg.model->cached_;
    for (std::size_t j = 0; j < seg.tokens.size(); ++j, ++t) {
      s.row_segment[t] = i;
      s.row_slot[t] = base + seg.first_node + j;
      s.row_position[t] = base + j;
      if (!seg.parents.empty()) {
        // Tree node first_node + j: its ancestors' slots, root first, then its own.
        s.row_listed[t] = s.tree_rows.size();
        for (std::int64_t a = static_cast<std::int64_t>(seg.first_node + j); a >= 0;
             a = seg.parents[static_cast<std::size_t>(a)])
          s.tree_rows.push_back(base + static_cast<std::size_t>(a));
        std::reverse(s.tree_rows.begin() + static_cast<std::ptrdiff_t>(s.row_listed[t]),
                     s.tree_rows.end());
        s.row_position[t] = base + (s.tree_rows.size() - s.row_listed[t]) - 1;  // + depth
      }
      dequantize_row(s.embed, static_cast<std::size_t>(seg.tokens[j]), s.x.data() + t * dim);
    }
  }
  auto kv_of = [&](std::size_t t) -> State& { return *segments[s.row_segment[t]].model->state_; };

  s.xn.resize(n * dim);
  s.q.resize(n * q_dim);
  s.k.resize(n * kv_dim);
  s.v.resize(n * kv_dim);
  s.attn.resize(n * q_dim);
  s.proj.resize(n * dim);
  s.gate.resize(n * ffn);
  s.up.resize(n * ffn);
  s.hidden.resize(n * ffn);

  // Rotary angles of the n new positions: angle = float(pos) * inv_freq (float), as HF does.
  s.rope_cos.resize(n * half);
  s.rope_sin.resize(n * half);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(s.row_position[t]) * s.inv_freq[i];
      s.rope_cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s.rope_sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }

  // Row ranges per task for the row-split operations: about 8 tasks per thread so that a thread
  // the OS deschedules holds up little; multiples of 32 rows (the AMX kernels' group).
  struct RowTasks {
    std::size_t per_task, tasks;
  };
  auto row_tasks = [&](std::size_t rows) {
    const std::size_t per_task =
        std::max<std::size_t>(32, round_up((rows + 8 * threads - 1) / (8 * threads), 32));
    return RowTasks{per_task, (rows + per_task - 1) / per_task};
  };
  // y[t][r] = W x for a range of rows, then an epilogue on that range.
  auto project = [&](const MatrixRef& w, float* y, std::size_t ldy, auto&& epilogue) {
    // A named struct, not a structured binding: clang before 16 cannot capture bindings in the
    // task lambda, which stopped clang-tidy on this file.
    const RowTasks split = row_tasks(w.rows);
    const PackedInput& in = s.packed(w);
    run(split.tasks, [&](std::size_t task, std::size_t) {
      const std::size_t r0 = task * split.per_task, r1 = std::min(w.rows, r0 + split.per_task);
      matmul(isa, w, in, r0, r1, y, ldy);
      epilogue(r0, r1);
    });
  };

  for (std::size_t li = 0; li < c.n_layers; ++li) {
    const LayerWeights& L = s.layers[li];

    // ---- attention block --------------------------------------------------------------------
    for (std::size_t t = 0; t < n; ++t)
      rms_norm(isa, s.x.data() + t * dim, L.attn_norm.data(), s.xn.data() + t * dim, dim,
               c.rms_norm_eps);
    s.pack(s.xn.data(), n, dim, {&L.q, &L.k, &L.v});
    // Tasks: q heads, then k heads, then v heads.
    run(c.n_heads + 2 * c.n_kv_heads, [&](std::size_t task, std::size_t) {
      const bool is_q = task < c.n_heads, is_k = !is_q && task < c.n_heads + c.n_kv_heads;
      const std::size_t head = is_q   ? task
                               : is_k ? task - c.n_heads
                                      : task - c.n_heads - c.n_kv_heads;
      const MatrixRef& w = is_q ? L.q : is_k ? L.k : L.v;
      float* out = is_q ? s.q.data() : is_k ? s.k.data() : s.v.data();
      const std::size_t width = is_q ? q_dim : kv_dim;
      const std::vector<float>& bias = is_q ? L.q_bias : is_k ? L.k_bias : L.v_bias;
      matmul(isa, w, s.packed(w), head * hd, (head + 1) * hd, out, width);
      for (std::size_t t = 0; t < n; ++t) {
        float* h = out + t * width + head * hd;
        if (!bias.empty())
          for (std::size_t d = 0; d < hd; ++d) h[d] += bias[head * hd + d];
        if (is_q || is_k) {
          const std::vector<float>& norm = is_q ? L.q_norm : L.k_norm;
          if (!norm.empty()) rms_norm(isa, h, norm.data(), h, hd, c.rms_norm_eps);
          apply_rope(c.rope_layout, h, s.rope_cos.data() + t * half, s.rope_sin.data() + t * half,
                     hd);
        }
        if (is_q) continue;
        State& kv = kv_of(t);
        const std::size_t at = kv.kv_offset(li, !is_k, head, s.row_slot[t], hd);
        if (kv.kv_f16)
          f32_to_f16_row(isa, h, kv.kv_f16.get() + at, hd);
        else
          std::copy(h, h + hd, kv.kv_f32.get() + at);
      }
    });
    // Attention: one task per (token, K/V head, part of its query heads), over the token's own
    // sequence's cache. The query heads of a K/V head go together (the kernel converts each
    // cached row once for all of them), split into parts only as far as the threads need tasks.
    const std::size_t group = c.n_heads / c.n_kv_heads;
    const std::size_t tasks = std::max<std::size_t>(n * c.n_kv_heads, 1);  // before any split
    const std::size_t splits = std::clamp<std::size_t>((s.pool->size() + tasks - 1) / tasks, 1,
                                                       std::max<std::size_t>(group, 1));
    const std::size_t part = std::max<std::size_t>((group + splits - 1) / splits, 1);
    const std::size_t parts = (group + part - 1) / part;  // per K/V head, `part` heads each
    run(n * c.n_kv_heads * parts, [&](std::size_t task, std::size_t thread) {
      const std::size_t t = task / (c.n_kv_heads * parts), kv_head = task / parts % c.n_kv_heads;
      const std::size_t head = kv_head * group + task % parts * part;
      State& kv = kv_of(t);
      AttentionArgs args;
      args.heads = std::min(part, (kv_head + 1) * group - head);
      args.q = s.q.data() + t * q_dim + head * hd;
      const std::size_t k_at = kv.kv_offset(li, false, kv_head, 0, hd),
                        v_at = kv.kv_offset(li, true, kv_head, 0, hd);
      args.kv_f16 = kv.kv_f16 != nullptr;
      args.k =
          args.kv_f16 ? static_cast<const void*>(kv.kv_f16.get() + k_at) : kv.kv_f32.get() + k_at;
      args.v =
          args.kv_f16 ? static_cast<const void*>(kv.kv_f16.get() + v_at) : kv.kv_f32.get() + v_at;
      args.count = s.row_position[t] + 1;       // causal: positions 0 .. its own
      if (s.row_listed[t] != State::no_list) {  // a tree node: the prefix, then its path
        args.listed = s.tree_rows.data() + s.row_listed[t];
        args.first_listed = segments[s.row_segment[t]].model->cached_;
      }
      args.head_dim = hd;
      args.row_stride = hd;
      args.scale = s.attn_scale;
      args.scores = kv.scratch[thread].data();  // sized for that model's context
      args.out = s.attn.data() + t * q_dim + head * hd;
      attend(isa, args);
    });
    s.pack(s.attn.data(), n, q_dim, {&L.o});
    project(L.o, s.proj.data(), dim, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t r = r0; r < r1; ++r) s.x[t * dim + r] += s.proj[t * dim + r];
    });

    // ---- SwiGLU block -----------------------------------------------------------------------
    for (std::size_t t = 0; t < n; ++t)
      rms_norm(isa, s.x.data() + t * dim, L.ffn_norm.data(), s.xn.data() + t * dim, dim,
               c.rms_norm_eps);
    s.pack(s.xn.data(), n, dim, {&L.gate, &L.up});
    {
      const RowTasks split = row_tasks(ffn);
      const PackedInput& in_gate = s.packed(L.gate);
      const PackedInput& in_up = s.packed(L.up);
      run(split.tasks, [&](std::size_t task, std::size_t) {
        const std::size_t r0 = task * split.per_task, r1 = std::min(ffn, r0 + split.per_task);
        matmul(isa, L.gate, in_gate, r0, r1, s.gate.data(), ffn);
        matmul(isa, L.up, in_up, r0, r1, s.up.data(), ffn);
        for (std::size_t t = 0; t < n; ++t)
          swiglu(isa, s.gate.data() + t * ffn + r0, s.up.data() + t * ffn + r0,
                 s.hidden.data() + t * ffn + r0, r1 - r0);
      });
    }
    s.pack(s.hidden.data(), n, ffn, {&L.down});
    project(L.down, s.proj.data(), dim, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t r = r0; r < r1; ++r) s.x[t * dim + r] += s.proj[t * dim + r];
    });
  }

  // ---- head ---------------------------------------------------------------------------------
  for (std::size_t t = 0; t < n; ++t)
    rms_norm(isa, s.x.data() + t * dim, s.output_norm.data(), s.xn.data() + t * dim, dim,
             c.rms_norm_eps);
  s.pack(s.xn.data(), n, dim, {&s.output});
  if (!s.head_ids.empty()) {
    // Restricted head: N rows of logits per token, scattered into rows of kMaskedLogit.
    const std::size_t rows = s.head.rows;
    s.head_out.resize(n * rows);
    project(s.head, s.head_out.data(), rows, [](std::size_t, std::size_t) {});
    std::size_t t = 0;
    for (const Segment& seg : segments)
      for (std::size_t j = 0; j < seg.tokens.size(); ++j, ++t) {
        float* row = seg.logits + j * c.vocab_size;
        std::fill_n(row, c.vocab_size, kMaskedLogit);
        for (std::size_t i = 0; i < rows; ++i)
          row[static_cast<std::size_t>(s.head_ids[i])] = s.head_out[t * rows + i];
      }
  } else if (segments.size() == 1) {
    project(s.output, segments[0].logits, c.vocab_size, [](std::size_t, std::size_t) {});
  } else {
    // One pass over the output matrix for every row, then each segment's rows to its buffer.
    s.batch_logits.resize(n * c.vocab_size);
    project(s.output, s.batch_logits.data(), c.vocab_size, [](std::size_t, std::size_t) {});
    const float* from = s.batch_logits.data();
    for (const Segment& seg : segments) {
      const std::size_t count = seg.tokens.size() * c.vocab_size;
      std::copy(from, from + count, seg.logits);
      from += count;
    }
  }
  for (const Segment& seg : segments)
    if (seg.parents.empty()) seg.model->cached_ += seg.tokens.size();  // a tree: accept_path()
}

}  // namespace specdec::cpu
