// cuda::Transformer: the host orchestration of the kernels (identical in the nvcc and emulation
// builds; only the kernels and the BLAS layer differ).
//
// Device memory:
//   weights     per layer W_qkv [(n_heads + 2 n_kv) head_dim][dim] (q, k, v rows concatenated:
//               one skinny GEMM reads them in one pass when they share a type), W_o [dim][q_dim],
//               W_gate_up [2 ffn][dim] (gate rows, then up rows), W_down [dim][ffn], the token
//               embedding and the output head: each in the file's type, as the file's bytes
//               (quantised blocks included; F32 matrices rounded to Options::weights); norms,
//               biases and rotary frequencies f32.
//   KV cache    K and V: [n_layers][n_kv][capacity][head_dim], f16 or f32. rollback() only moves
//               the end (O(1)); positions beyond it are overwritten by later steps.
//   activations [max_step_tokens] rows each; the logits buffer grows to the longest forward().
//
// One step of n tokens (at most max_step_tokens; forward() loops over steps):
//   embedding -> per layer: RMSNorm (+ residual) -> QKV GEMM -> rotary + KV write -> attention ->
//   O GEMM -> RMSNorm + residual -> gate/up GEMM -> SwiGLU -> down GEMM -> ... -> final RMSNorm
//   (+ residual) -> output GEMM into the logits rows.
// GEMMs use the skinny kernel for n <= 16 (any weight type, dequantised in registers) and cuBLAS
// beyond (activations converted to Options::weights' 16-bit type; matrices of another type
// dequantised to it in row chunks of a scratch buffer before each product).
// Steps with n <= 16 are captured into CUDA graphs (host/graph.hpp) keyed by (n, attention
// splits, the key of appended work, the tree nodes staged (0: not a tree step), the first logits
// row written) and replayed.
// Token trees (forward_tree, extend_tree): skinny steps (16 rows each, one for a tree of up to 16
// nodes) whose rows are tree nodes, written to the slots after the prefix in node order; the rotary
// kernel rotates each for its depth and the attention reads each row's path (kernels/attention.hpp,
// TreeRows, staged like the token ids). accept_path() moves the kept path's K/V rows into place
// (kernels/kv_path.hpp). The token ids and the start position reach the device through a ring of
// pinned staging slots, each reused only after the copies that last read it have run (an event per
// slot), so consecutive steps are enqueued without waiting for the GPU.
#include "specdec/cuda/transformer.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "host/blas.hpp"
#include "host/device_buffer.hpp"
#include "host/graph.hpp"
#include "kernels/attention.hpp"
#include "kernels/convert.hpp"
#include "kernels/embedding.hpp"
#include "kernels/kv_path.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope_kv.hpp"
#include "kernels/skinny_gemm.hpp"
#include "kernels/swiglu.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/rope.hpp"
#include "specdec/model/token_tree.hpp"

namespace specdec::cuda {

namespace {

constexpr int kGraphMaxTokens = kernels::kSkinnyMaxTokens;
static_assert(Transformer::max_tree_nodes == kernels::kMaxTreeNodes);
/// Pinned staging slots for the per-step token ids and start position (a draft round enqueues up
/// to k steps before the host waits).
constexpr std::size_t kStagingSlots = 8;

/// Bytes as GiB with two decimals, for messages.
std::string gib(std::size_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

DType half_type(Options::Weights w) {
  return w == Options::Weights::f16 ? DType::f16 : DType::bf16;
}

/// Prefill steps dequantise a matrix for cuBLAS in row chunks of a scratch buffer of this size
/// by default (Options::prefill_scratch_bytes), so that a large output head needs no full 16-bit
/// copy.
constexpr std::size_t kPrefillScratchBytes = std::size_t{32} << 20;

/// A weight matrix bound through the schema (name and shape), of a type the kernels multiply.
const Tensor& matrix(const WeightStore& w, const ModelConfig& c, LlamaTensor id,
                     std::size_t layer = 0) {
  const Tensor* found = nullptr;
  try {
    found = &llama_weight(w, c, id, layer);
  } catch (const Error& e) {
    throw Error(fmt::format("cuda::Transformer: {}", e.what()));
  }
  const Tensor& t = *found;
  const std::string& name = t.name;
  const std::size_t rows = t.rows(), cols = t.cols();
  if (!kernels::has_weight_kernels(t.dtype)) {
    throw Error(
        fmt::format("cuda::Transformer: tensor {} has type {}, which the CUDA backend "
                    "cannot multiply",
                    name, dtype_name(t.dtype)));
  }
  const std::size_t row_bytes = dtype_row_bytes(t.dtype, cols, "tensor " + name);
  if (t.data == nullptr || t.nbytes < rows * row_bytes) {
    throw Error(fmt::format("cuda::Transformer: tensor {} has {} bytes of data for [{}, {}] {}",
                            name, t.nbytes, rows, cols, dtype_name(t.dtype)));
  }
  return t;
}

/// The device type of a matrix: the file's, except F32, which becomes `f32_as` (F16 or BF16).
DType device_type(const Tensor& t, DType f32_as) {
  return t.dtype == DType::f32 ? f32_as : t.dtype;
}

/// Appends the tensor's rows in the device type: the file's bytes as they are (blocks of a
/// quantised type included), F32 rounded to F16 / BF16 (the model layer's conversion).
void append_rows(const Tensor& t, DType type, std::vector<std::uint8_t>& out) {
  const std::size_t at = out.size();
  if (t.dtype == type) {
    const std::size_t bytes = t.rows() * dtype_row_bytes(t.dtype, t.cols(), "tensor " + t.name);
    out.insert(out.end(), reinterpret_cast<const std::uint8_t*>(t.data),
               reinterpret_cast<const std::uint8_t*>(t.data) + bytes);
    return;
  }
  const std::size_t count = t.elements();
  std::vector<float> values(count);
  dequantize(t.dtype, t.data, values.data(), count);  // F32: a copy
  out.resize(at + count * 2);
  quant::quantize(type, values,
                  std::span<std::byte>(reinterpret_cast<std::byte*>(out.data() + at), count * 2));
}

template <class T>
DeviceArray<T> upload(const std::vector<T>& values) {
  DeviceArray<T> d(values.size());
  d.upload(values.data(), values.size());
  return d;
}

/// A weight matrix in device memory, in its device type (device_type()): `rows` rows of `cols`
/// weights, row r at data + r * dtype_row_bytes(type, cols). Non-owning (Impl::storage owns).
struct Matrix {
  DType type = DType::f16;
  const void* data = nullptr;
  std::size_t rows = 0, cols = 0;
};

/// The output rows of one projection: the stacked tensors (q, k, v or gate, up), each
/// consecutive run of one device type stored as one matrix. With a uniform type (the common case)
/// that is one matrix and one GEMM; a quantised file that mixes types within a projection (e.g.
/// Q4_K attn_q / attn_k with a Q6_K attn_v) gets one GEMM per run, each writing its rows of the
/// output (row stride `rows`).
struct Projection {
  struct Part {
    Matrix matrix;
    std::size_t first_row = 0;  ///< of the projection's output
  };
  std::vector<Part> parts;
  std::size_t rows = 0;
};

struct Layer {
  Projection qkv, o, gate_up, down;
  DeviceArray<float> attn_norm, ffn_norm, qkv_bias, q_norm, k_norm;
};

}  // namespace

struct Transformer::Impl {
  ModelConfig config;
  std::shared_ptr<const WeightStore> weights;  // kept for the lifetime (cheap: shared)
  Options options;
  DType half{};  // Options::weights: F32 matrices and the prefill GEMMs' inputs
  KvType kvtype{};
  std::size_t capacity = 0;
  std::size_t cached = 0;
  std::size_t step_tokens = 0;
  int attention_chunk = 0;
  int attention_max_splits = 0;
  int norm_threads = 256;
  int gemm_warps = 4;
  int attention_warps = 4;

  cudaStream_t stream = nullptr;
  std::unique_ptr<Blas> blas;

  std::vector<DeviceArray<std::uint8_t>> storage;  // every weight matrix's bytes
  Matrix embed;                                    // [vocab][dim]
  Projection head;                                 // [vocab][dim]: the embedding when tied
  DeviceArray<float> output_norm, inv_freq;
  std::vector<Layer> layers;
  DeviceArray<std::uint8_t> k_cache, v_cache;  // [n_layers][n_kv][capacity][head_dim]

  // Per step: [step_tokens] rows.
  DeviceArray<token_t> tokens;
  DeviceArray<int> start;
  DeviceArray<kernels::TreeRows> tree_rows;  // [1]: the tree shape of a tree step's rows
  DeviceArray<float> h, xn, qkv, q, att, delta, gate_up, act, attn_work;
  DeviceArray<std::uint16_t> x16;  // prefill: activations for cuBLAS, [step_tokens][max in]
  DeviceArray<std::uint16_t> w16;  // prefill: a row chunk of a dequantised matrix (may be empty)
  DeviceArray<float> logits;       // [logits_rows][vocab]
  std::size_t logits_rows = 0;
  std::size_t last_rows = 0;
  // Staging ring: slot s holds the ids and start position of a step whose copies were
  // enqueued before staging_done[s] was recorded.
  PinnedArray<token_t> staging_tokens;          // [kStagingSlots][step_tokens]
  PinnedArray<int> staging_start;               // [kStagingSlots]
  PinnedArray<kernels::TreeRows> staging_tree;  // [kStagingSlots]
  cudaEvent_t staging_done[kStagingSlots] = {};
  std::size_t staging_next = 0;
  PinnedArray<float> host_logits;

  std::unique_ptr<GraphCache> graphs;
  GraphStats stats;
  /// The parents of the tree scored since the cache last changed (forward_tree, extend_tree):
  /// its nodes' K/V are in the slots cached, cached + 1, ...; empty when there is none.
  std::vector<std::int32_t> tree_parents;

  ~Impl() {
    graphs.reset();
    blas.reset();
    for (cudaEvent_t e : staging_done)
      if (e != nullptr) cudaEventDestroy(e);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  [[nodiscard]] std::size_t kv_layer_bytes() const {
    return config.n_kv_heads * capacity * config.head_dim * kv_type_bytes(kvtype);
  }

  /// Stores the tensors' rows on the device, one matrix per run of equal device types.
  Projection upload_projection(std::initializer_list<const Tensor*> tensors) {
    Projection p;
    std::vector<std::uint8_t> bytes;
    for (auto it = tensors.begin(); it != tensors.end();) {
      const DType type = device_type(**it, half);
      Matrix m{type, nullptr, 0, (*it)->cols()};
      bytes.clear();
      for (; it != tensors.end() && device_type(**it, half) == type; ++it) {
        append_rows(**it, type, bytes);
        m.rows += (*it)->rows();
      }
      m.data = upload_bytes(bytes);
      p.parts.push_back({m, p.rows});
      p.rows += m.rows;
    }
    return p;
  }
  const void* upload_bytes(const std::vector<std::uint8_t>& bytes) {
    storage.push_back(upload(bytes));
    return storage.back().get();
  }

  /// y[t][0, P.rows) = x[t] P^T for n tokens: the skinny GEMM for n <= 16, otherwise cuBLAS on
  /// 16-bit inputs (activations rounded to Options::weights; a matrix of another type is
  /// dequantised to it chunk by chunk).
  void gemm(const Projection& P, const float* x, float* y, int n, cudaStream_t s) {
    const int ldy = static_cast<int>(P.rows);
    if (n <= kernels::kSkinnyMaxTokens) {
      for (const auto& [m, first_row] : P.parts) {
        kernels::skinny_gemm(m.type, m.data, x, y + first_row, n, static_cast<int>(m.rows),
                             static_cast<int>(m.cols), s, gemm_warps, ldy,
                             options.gemm_rows_per_lane);
      }
      return;
    }
    const std::size_t in = P.parts.front().matrix.cols;
    kernels::convert_f32(x, static_cast<std::size_t>(n) * in, half, x16.get(), s);
    for (const auto& [m, first_row] : P.parts) {
      if (m.type == half) {
        blas->gemm_xwT(half, m.data, x16.get(), y + first_row, n, static_cast<int>(m.rows),
                       static_cast<int>(m.cols), ldy, s);
        continue;
      }
      const std::size_t row_bytes = dtype_row_bytes(m.type, m.cols, "matrix");
      const std::size_t chunk = w16.size() / m.cols;
      for (std::size_t r = 0; r < m.rows; r += chunk) {
        const auto rows = static_cast<int>(std::min(chunk, m.rows - r));
        kernels::dequantize_rows(m.type, static_cast<const std::uint8_t*>(m.data) + r * row_bytes,
                                 rows, static_cast<int>(m.cols), half, w16.get(), s);
        blas->gemm_xwT(half, w16.get(), x16.get(), y + first_row + r, n, rows,
                       static_cast<int>(m.cols), ldy, s);
      }
    }
  }

  /// Enqueues the whole network for n tokens (ids in `tokens`, position in `start`; a tree's
  /// shape in `tree_rows` when tree_nodes > 0: the nodes its attention stages).
  void layers_pass(int n, int chunk, int splits, int tree_nodes, float* logits_out,
                   cudaStream_t s) {
    const ModelConfig& c = config;
    const std::size_t dim = c.dim, hd = c.head_dim, ffn = c.ffn_dim;
    const float eps = c.rms_norm_eps;
    kernels::embedding_gather(embed.type, embed.data, static_cast<int>(c.vocab_size),
                              static_cast<int>(dim), tokens.get(), n, h.get(), s);
    for (std::size_t li = 0; li < c.n_layers; ++li) {
      const Layer& L = layers[li];
      kernels::rmsnorm_residual(h.get(), li == 0 ? nullptr : delta.get(), L.attn_norm.get(), eps, n,
                                static_cast<int>(dim), xn.get(), norm_threads, s);
      gemm(L.qkv, xn.get(), qkv.get(), n, s);

      kernels::RopeKvParams r;
      r.qkv = qkv.get();
      r.n = n;
      r.n_heads = static_cast<int>(c.n_heads);
      r.n_kv = static_cast<int>(c.n_kv_heads);
      r.head_dim = static_cast<int>(hd);
      r.bias = L.qkv_bias.size() > 0 ? L.qkv_bias.get() : nullptr;
      r.q_norm = L.q_norm.size() > 0 ? L.q_norm.get() : nullptr;
      r.k_norm = L.k_norm.size() > 0 ? L.k_norm.get() : nullptr;
      r.norm_eps = eps;
      r.inv_freq = inv_freq.get();
      r.layout = c.rope_layout;
      r.start = start.get();
      r.q_out = q.get();
      r.kv_type = kvtype;
      r.k_cache = k_cache.get() + li * kv_layer_bytes();
      r.v_cache = v_cache.get() + li * kv_layer_bytes();
      r.capacity = static_cast<int>(capacity);
      r.tree = tree_nodes > 0 ? tree_rows.get() : nullptr;
      kernels::rope_kv_write(r, s);

      kernels::AttentionParams a;
      a.q = q.get();
      a.kv_type = kvtype;
      a.k_cache = r.k_cache;
      a.v_cache = r.v_cache;
      a.capacity = static_cast<int>(capacity);
      a.start = start.get();
      a.n = n;
      a.n_heads = r.n_heads;
      a.n_kv = r.n_kv;
      a.head_dim = r.head_dim;
      a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
      a.chunk = chunk;
      a.splits = splits;
      a.partial = attn_work.get();
      a.out = att.get();
      a.tree = r.tree;
      a.tree_nodes = tree_nodes;
      kernels::attention(a, s, attention_warps);

      gemm(L.o, att.get(), delta.get(), n, s);
      kernels::rmsnorm_residual(h.get(), delta.get(), L.ffn_norm.get(), eps, n,
                                static_cast<int>(dim), xn.get(), norm_threads, s);
      gemm(L.gate_up, xn.get(), gate_up.get(), n, s);
      kernels::swiglu(gate_up.get(), n, static_cast<int>(ffn), act.get(), s);
      gemm(L.down, act.get(), delta.get(), n, s);
    }
    kernels::rmsnorm_residual(h.get(), c.n_layers > 0 ? delta.get() : nullptr, output_norm.get(),
                              eps, n, static_cast<int>(dim), xn.get(), norm_threads, s);
    gemm(head, xn.get(), logits_out, n, s);
  }

  /// One step of n tokens: ids from the host (host_ids) or from device memory (device_ids),
  /// logits into logits_out; `epilogue` (last step of a forward only) is enqueued after it, with
  /// the forward's logits (forward_logits), and captured with it. With `tree` the tokens are
  /// nodes tree->first ... of a token tree (n <= 16), written after the tree's earlier nodes,
  /// and cached does not move. Steps of up to 16 tokens whose logits rows lie in `logits` are
  /// captured into CUDA graphs (keyed by the first row, among others) and replayed.
  void step(const token_t* host_ids, const token_t* device_ids, int n, float* logits_out,
            const float* forward_logits, const StepEpilogue* epilogue,
            const kernels::TreeRows* tree = nullptr) {
    // A staging slot is reused once the copies that last read it have run.
    const std::size_t slot = staging_next++ % kStagingSlots;
    SPECDEC_CUDA_CHECK(cudaEventSynchronize(staging_done[slot]));
    token_t* ids = staging_tokens.get() + slot * step_tokens;
    int* start_position = staging_start.get() + slot;
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(token_t);
    if (host_ids != nullptr) {
      std::copy(host_ids, host_ids + n, ids);
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(tokens.get(), ids, bytes, cudaMemcpyHostToDevice, stream));
    } else {
      SPECDEC_CUDA_CHECK(
          cudaMemcpyAsync(tokens.get(), device_ids, bytes, cudaMemcpyDeviceToDevice, stream));
    }
    const int first_slot = static_cast<int>(cached) + (tree != nullptr ? tree->first : 0);
    *start_position = first_slot;
    SPECDEC_CUDA_CHECK(
        cudaMemcpyAsync(start.get(), start_position, sizeof(int), cudaMemcpyHostToDevice, stream));
    if (tree != nullptr) {
      kernels::TreeRows* staged = staging_tree.get() + slot;
      *staged = *tree;
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(tree_rows.get(), staged, sizeof(kernels::TreeRows),
                                         cudaMemcpyHostToDevice, stream));
    }
    SPECDEC_CUDA_CHECK(cudaEventRecord(staging_done[slot], stream));

    const int kv_len = first_slot + n;
    auto run_epilogue = [&](cudaStream_t s) {
      if (epilogue != nullptr) epilogue->enqueue(s, forward_logits);
    };
    const int tree_nodes = tree != nullptr ? kernels::tree_staged_nodes(tree->first + n) : 0;
    if (n <= kGraphMaxTokens) {
      const int splits = kernels::attention_splits(kv_len, attention_chunk);
      auto record = [&](cudaStream_t s) {
        layers_pass(n, attention_chunk, splits, tree_nodes, logits_out, s);
        run_epilogue(s);
      };
      const std::ptrdiff_t out_row =
          (logits_out - logits.get()) / static_cast<std::ptrdiff_t>(config.vocab_size);
      if (options.cuda_graphs && out_row >= 0 &&
          static_cast<std::size_t>(out_row) + static_cast<std::size_t>(n) <= logits_rows) {
        const GraphKey key{n, splits, epilogue != nullptr ? epilogue->key : 0, tree_nodes,
                           static_cast<int>(out_row)};
        ++(graphs->run(key, record) ? stats.captures : stats.replays);
      } else {
        record(stream);
        ++stats.direct;
      }
    } else {
      // Prefill: one split over the whole cache (parallelism comes from the many query rows).
      const int chunk = static_cast<int>((capacity + 31) / 32 * 32);
      layers_pass(n, chunk, 1, 0, logits_out, stream);
      run_epilogue(stream);
      ++stats.direct;
    }
    if (tree == nullptr) cached += static_cast<std::size_t>(n);
  }

  /// Throws, naming `who`, for a host token id outside the vocabulary.
  void check_ids(std::span<const token_t> ids, const char* who) const {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= config.vocab_size)
        throw Error(
            fmt::format("cuda::Transformer::{}: token {} (at {}) is outside the vocabulary [0, {})",
                        who, ids[i], i, config.vocab_size));
    }
  }

  /// Grows the logits buffer to `rows` rows (at least 16), waiting for the old one's users.
  void reserve_logits(std::size_t rows) {
    if (rows <= logits_rows) return;
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffer may still be in use
    logits_rows = std::max<std::size_t>(rows, kGraphMaxTokens);
    logits = DeviceArray<float>(logits_rows * config.vocab_size);
    graphs->clear();  // they write into the old buffer
  }

  /// forward_tree() (first = 0) and extend_tree() (first = the pending tree's nodes): scores
  /// `tokens` as nodes first, first + 1, ... after the pending tree's first `first` nodes.
  /// Nothing changes before every check has passed.
  LogitsView score_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                        std::size_t first, const char* who) {
    const std::size_t n = tokens.size();
    if (n == 0) throw Error(fmt::format("cuda::Transformer::{}: no tokens", who));
    check_tree_nodes(n, parents, first, max_tree_nodes, cached, capacity,
                     fmt::format("cuda::Transformer::{}", who));
    check_ids(tokens, who);
    // The whole tree: the pending tree's first nodes, then these; each row's depth and path.
    std::vector<std::int32_t> all(tree_parents.begin(),
                                  tree_parents.begin() + static_cast<std::ptrdiff_t>(first));
    all.insert(all.end(), parents.begin(), parents.end());
    std::vector<std::size_t> depth;
    tree_depths(all, depth);
    reserve_logits(n);
    // Skinny steps of at most 16 nodes (batch invariance holds within the skinny GEMM only); a
    // step's rows see the nodes of the earlier ones in their slots.
    const std::size_t part = kernels::kSkinnyMaxTokens;
    for (std::size_t part_first = 0; part_first < n; part_first += part) {
      const std::size_t rows_here = std::min(part, n - part_first);
      kernels::TreeRows rows;
      rows.first = static_cast<int>(first + part_first);
      for (std::size_t t = 0; t < rows_here; ++t) {
        const std::size_t node = first + part_first + t;
        rows.depth[t] = static_cast<int>(depth[node]);
        for (auto v = static_cast<std::int32_t>(node); v >= 0; v = all[static_cast<std::size_t>(v)])
          rows.ancestor[t][depth[static_cast<std::size_t>(v)]] = static_cast<std::uint8_t>(v);
      }
      step(tokens.data() + part_first, nullptr, static_cast<int>(rows_here),
           logits.get() + part_first * config.vocab_size, logits.get(), nullptr, &rows);
    }
    tree_parents.swap(all);
    last_rows = n;
    return LogitsView{logits.get(), n, config.vocab_size, Memory::device};
  }

  /// forward() for ids on the host or in device memory.
  LogitsView forward(const token_t* host_ids, const token_t* device_ids, std::size_t count,
                     const StepEpilogue* epilogue) {
    const ModelConfig& c = config;
    if (count == 0) throw Error("cuda::Transformer::forward: no tokens");
    if (count > capacity - cached) {
      throw Error(fmt::format(
          "cuda::Transformer::forward: {} cached + {} new tokens exceed the context length {}",
          cached, count, capacity));
    }
    if (host_ids != nullptr) check_ids(std::span(host_ids, count), "forward");
    if (epilogue != nullptr && (epilogue->key == 0 || !epilogue->enqueue))
      throw Error("cuda::Transformer::forward: a step epilogue needs a nonzero key and work");
    reserve_logits(count);
    tree_parents.clear();  // its slots are overwritten
    const std::size_t before = cached;
    try {
      for (std::size_t first = 0; first < count; first += step_tokens) {
        const std::size_t n = std::min(step_tokens, count - first);
        const bool last = first + n == count;
        step(host_ids != nullptr ? host_ids + first : nullptr,
             device_ids != nullptr ? device_ids + first : nullptr, static_cast<int>(n),
             logits.get() + first * c.vocab_size, logits.get(), last ? epilogue : nullptr);
      }
    } catch (...) {
      cached = before;
      throw;
    }
    last_rows = count;
    return LogitsView{logits.get(), count, c.vocab_size, Memory::device};
  }
};

Transformer::Transformer(const LoadedModel& model, Options options)
    : Transformer(model.config, model.weights, options) {}

Transformer::Transformer(const ModelConfig& config, std::shared_ptr<const WeightStore> weights,
                         Options options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  config.validate();
  if (!weights) throw Error("cuda::Transformer: no weights");
  const ModelConfig& c = m.config = config;
  m.weights = std::move(weights);
  m.options = options;
  const WeightStore& w = *m.weights;
  if (c.head_dim % 8 != 0 || c.head_dim > 256) {
    throw Error(
        fmt::format("cuda::Transformer: head_dim {} is not a multiple of 8 up to 256", c.head_dim));
  }
  if (options.max_step_tokens < static_cast<std::size_t>(kGraphMaxTokens)) {
    throw Error("cuda::Transformer: Options::max_step_tokens must be at least 16");
  }
  m.half = half_type(options.weights);
  m.kvtype = options.kv_type;
  m.capacity = options.context_length != 0 ? options.context_length : c.context_length;
  if (m.capacity == 0)
    throw Error("cuda::Transformer: context length is 0 (set Options::context_length)");
  if (m.capacity > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error(fmt::format(
        "cuda::Transformer: a context of {} positions is more than the kernels index (2^31 - 1): "
        "set a shorter context (Options::context_length)",
        m.capacity));
  m.step_tokens = options.max_step_tokens;
  if (options.norm_threads > 0) m.norm_threads = options.norm_threads;
  if (options.gemm_warps > 32) {
    throw Error(fmt::format("cuda::Transformer: Options::gemm_warps is {}, at most 32",
                            options.gemm_warps));
  }
  if (options.gemm_warps > 0) m.gemm_warps = options.gemm_warps;
  if (const int r = options.gemm_rows_per_lane; !kernels::valid_rows_per_lane(r)) {
    throw Error(fmt::format(
        "cuda::Transformer: Options::gemm_rows_per_lane is {}, not 0 (automatic), 1, 2 or 4", r));
  }
  if (options.attention_warps > 0) m.attention_warps = options.attention_warps;

  SPECDEC_CUDA_CHECK(cudaSetDevice(options.device));
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  m.blas = std::make_unique<Blas>();
  m.graphs = std::make_unique<GraphCache>(m.stream);
  int sms = 1;
  SPECDEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, options.device));
  m.attention_chunk =
      kernels::attention_chunk(static_cast<int>(m.capacity), static_cast<int>(c.n_kv_heads), sms);
  m.attention_max_splits =
      kernels::attention_splits(static_cast<int>(m.capacity), m.attention_chunk);

  // ---- weights: matrices keep their file's bytes (F32 ones become m.half), vectors are f32
  using enum LlamaTensor;
  {
    const Projection table = m.upload_projection({&matrix(w, c, token_embd)});
    m.embed = table.parts.front().matrix;
    m.head = is_present(output, c) ? m.upload_projection({&matrix(w, c, output)}) : table;
  }
  m.output_norm = upload(llama_vector(w, c, output_norm));
  m.inv_freq = upload(rope_inv_freq(c, w));
  m.layers.resize(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    Layer& L = m.layers[i];
    L.qkv = m.upload_projection(
        {&matrix(w, c, attn_q, i), &matrix(w, c, attn_k, i), &matrix(w, c, attn_v, i)});
    L.o = m.upload_projection({&matrix(w, c, attn_output, i)});
    L.gate_up = m.upload_projection({&matrix(w, c, ffn_gate, i), &matrix(w, c, ffn_up, i)});
    L.down = m.upload_projection({&matrix(w, c, ffn_down, i)});
    L.attn_norm = upload(llama_vector(w, c, attn_norm, i));
    L.ffn_norm = upload(llama_vector(w, c, ffn_norm, i));
    if (is_present(attn_q_bias, c)) {  // q, k and v biases as one vector, as qkv is one matrix
      std::vector<float> bias;
      for (const LlamaTensor part : {attn_q_bias, attn_k_bias, attn_v_bias}) {
        const std::vector<float> b = llama_vector(w, c, part, i);
        bias.insert(bias.end(), b.begin(), b.end());
      }
      L.qkv_bias = upload(bias);
    }
    if (is_present(attn_q_norm, c)) {
      L.q_norm = upload(llama_vector(w, c, attn_q_norm, i));
      L.k_norm = upload(llama_vector(w, c, attn_k_norm, i));
    }
  }

  // ---- KV cache and step buffers. The cache is allocated whole: check it against the device's
  // free memory first, so that a model claiming a long context gets the numbers and
  // Options::context_length rather than a bare cudaErrorMemoryAllocation.
  {
    std::size_t kv_bytes_total = 0;
    if (__builtin_mul_overflow(2 * c.n_layers, m.kv_layer_bytes(), &kv_bytes_total))
      throw Error(fmt::format("cuda::Transformer: the KV cache of {} positions overflows 64 bits",
                              m.capacity));
    std::size_t free_bytes = 0, total_bytes = 0;
    SPECDEC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (kv_bytes_total > free_bytes)
      throw Error(fmt::format(
          "cuda::Transformer: a context of {} positions needs {} GiB of device memory for the KV "
          "cache ({} layers x 2 x {} KV heads x {} positions x head dim {} x {} bytes) but device "
          "{} has {} GiB free: set a shorter context (Options::context_length)",
          m.capacity, gib(kv_bytes_total), c.n_layers, c.n_kv_heads, m.capacity, c.head_dim,
          kv_type_bytes(m.kvtype), options.device, gib(free_bytes)));
  }
  m.k_cache = DeviceArray<std::uint8_t>(c.n_layers * m.kv_layer_bytes());
  m.v_cache = DeviceArray<std::uint8_t>(c.n_layers * m.kv_layer_bytes());
  const std::size_t S = m.step_tokens;
  m.tokens = DeviceArray<token_t>(S);
  m.start = DeviceArray<int>(1);
  m.tree_rows = DeviceArray<kernels::TreeRows>(1);
  m.h = DeviceArray<float>(S * c.dim);
  m.xn = DeviceArray<float>(S * c.dim);
  m.qkv = DeviceArray<float>(S * (c.q_dim() + 2 * c.kv_dim()));
  m.q = DeviceArray<float>(S * c.q_dim());
  m.att = DeviceArray<float>(S * c.q_dim());
  m.delta = DeviceArray<float>(S * c.dim);
  m.gate_up = DeviceArray<float>(S * 2 * c.ffn_dim);
  m.act = DeviceArray<float>(S * c.ffn_dim);
  if (S > static_cast<std::size_t>(kernels::kSkinnyMaxTokens)) {  // prefill steps are possible
    m.x16 = DeviceArray<std::uint16_t>(S * std::max({c.dim, c.ffn_dim, c.q_dim()}));
    // The dequantisation scratch: the largest matrix that is not already m.half, capped by
    // Options::prefill_scratch_bytes (but at least one row).
    std::size_t largest = 0, widest = 0;
    auto consider = [&](const Projection& P) {
      for (const auto& part : P.parts) {
        if (part.matrix.type == m.half) continue;
        largest = std::max(largest, part.matrix.rows * part.matrix.cols);
        widest = std::max(widest, part.matrix.cols);
      }
    };
    consider(m.head);
    for (const Layer& L : m.layers) {
      for (const Projection* P : {&L.qkv, &L.o, &L.gate_up, &L.down}) consider(*P);
    }
    if (largest > 0) {
      const std::size_t cap = (options.prefill_scratch_bytes != 0 ? options.prefill_scratch_bytes
                                                                  : kPrefillScratchBytes) /
                              sizeof(std::uint16_t);
      m.w16 = DeviceArray<std::uint16_t>(std::min(largest, std::max(cap, widest)));
    }
  }
  m.attn_work = DeviceArray<float>(kernels::attention_workspace_floats(
      m.attention_max_splits, kGraphMaxTokens, static_cast<int>(c.n_heads),
      static_cast<int>(c.head_dim)));
  m.staging_tokens = PinnedArray<token_t>(kStagingSlots * S);
  m.staging_start = PinnedArray<int>(kStagingSlots);
  m.staging_tree = PinnedArray<kernels::TreeRows>(kStagingSlots);
  for (cudaEvent_t& e : m.staging_done)
    SPECDEC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

Transformer::~Transformer() = default;
Transformer::Transformer(Transformer&&) noexcept = default;
Transformer& Transformer::operator=(Transformer&&) noexcept = default;

LogitsView Transformer::forward(std::span<const token_t> tokens, const StepEpilogue* epilogue) {
  return impl_->forward(tokens.data(), nullptr, tokens.size(), epilogue);
}

LogitsView Transformer::forward(DeviceTokens tokens, const StepEpilogue* epilogue) {
  if (tokens.data == nullptr && tokens.count > 0)
    throw Error("cuda::Transformer::forward: device tokens without an address");
  return impl_->forward(nullptr, tokens.data, tokens.count, epilogue);
}

void Transformer::rollback(std::size_t n) {
  if (n > impl_->cached) {
    throw Error(fmt::format("cuda::Transformer::rollback({}): only {} positions are cached", n,
                            impl_->cached));
  }
  impl_->cached = n;
  impl_->tree_parents.clear();
}

LogitsView Transformer::forward_tree(std::span<const token_t> tokens,
                                     std::span<const std::int32_t> parents) {
  return impl_->score_tree(tokens, parents, 0, "forward_tree");
}

LogitsView Transformer::extend_tree(std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
  return impl_->score_tree(tokens, parents, impl_->tree_parents.size(), "extend_tree");
}

void Transformer::accept_path(std::span<const std::size_t> path) {
  Impl& m = *impl_;
  check_tree_path(m.tree_parents, path, "cuda::Transformer::accept_path");
  kernels::KvPath kept;
  kept.count = static_cast<int>(path.size());
  for (std::size_t k = 0; k < path.size(); ++k) kept.node[k] = static_cast<int>(path[k]);
  const ModelConfig& c = m.config;
  kernels::kv_keep_path(m.k_cache.get(), m.v_cache.get(),
                        static_cast<int>(c.n_layers * c.n_kv_heads), static_cast<int>(m.capacity),
                        static_cast<int>(c.head_dim * kv_type_bytes(m.kvtype)),
                        static_cast<int>(m.cached), kept, m.stream);
  m.cached += path.size();
  m.tree_parents.clear();
}

void Transformer::synchronize() { SPECDEC_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

void Transformer::copy_logits_to_host(std::span<float> out) {
  Impl& m = *impl_;
  const std::size_t count = m.last_rows * m.config.vocab_size;
  if (out.size() != count) {
    throw Error(fmt::format(
        "cuda::Transformer::copy_logits_to_host: {} floats given, the logits are {} x {}",
        out.size(), m.last_rows, m.config.vocab_size));
  }
  if (count == 0) return;
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(out.data(), m.logits.get(), count * sizeof(float),
                                     cudaMemcpyDeviceToHost, m.stream));
  synchronize();
}

LogitsView Transformer::logits_to_host() {
  Impl& m = *impl_;
  const std::size_t count = m.last_rows * m.config.vocab_size;
  if (m.host_logits.size() < count) m.host_logits = PinnedArray<float>(count);
  copy_logits_to_host(std::span<float>(m.host_logits.get(), count));
  return LogitsView{m.host_logits.get(), m.last_rows, m.config.vocab_size, Memory::host};
}

std::size_t Transformer::cached() const noexcept { return impl_->cached; }
std::size_t Transformer::vocab_size() const noexcept { return impl_->config.vocab_size; }
std::size_t Transformer::context_length() const noexcept { return impl_->capacity; }
const ModelConfig& Transformer::config() const noexcept { return impl_->config; }
const Options& Transformer::options() const noexcept { return impl_->options; }
void* Transformer::stream() const noexcept { return impl_->stream; }
Transformer::GraphStats Transformer::graph_stats() const noexcept { return impl_->stats; }

std::size_t Transformer::device_bytes() const noexcept {
  const Impl& m = *impl_;
  std::size_t b = m.output_norm.bytes() + m.inv_freq.bytes() + m.k_cache.bytes() +
                  m.v_cache.bytes() + m.tokens.bytes() + m.start.bytes() + m.h.bytes() +
                  m.xn.bytes() + m.qkv.bytes() + m.q.bytes() + m.att.bytes() + m.delta.bytes() +
                  m.gate_up.bytes() + m.act.bytes() + m.attn_work.bytes() + m.x16.bytes() +
                  m.w16.bytes() + m.logits.bytes();
  for (const auto& bytes : m.storage) b += bytes.bytes();
  for (const Layer& L : m.layers) {
    b += L.attn_norm.bytes() + L.ffn_norm.bytes() + L.qkv_bias.bytes() + L.q_norm.bytes() +
         L.k_norm.bytes();
  }
  return b;
}

}  // namespace specdec::cuda
