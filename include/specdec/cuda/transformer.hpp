#pragma once
// The CUDA backend: a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) on one GPU, with its
// weights uploaded once in their file's type (F16, BF16 and every quantised type of the model
// layer: Q8_0, Q4_0 ... Q6_K, IQ4_NL, IQ4_XS, dequantised in registers by the kernels) and its KV
// cache in device memory.
//
// forward(tokens) returns the logits in DEVICE memory (LogitsView::where == Memory::device; the
// type declares it: logits_memory = Memory::device): the decoders sample them there with
// cuda::DeviceSampler (cuda/sampler.hpp), and only accepted counts and emitted tokens cross to
// the host. forward() also takes token ids that are already in device memory (DeviceTokens: the
// drafted tokens) and work to append to the step and capture with it (StepEpilogue: the sampling
// kernels). logits_to_host() / copy_logits_to_host() copy the logits explicitly.
//
// Steps of 1 to 16 tokens (decode, verify) use the memory-bound kernels (skinny GEMM, split-K
// attention) and are replayed from CUDA graphs captured once per shape; longer inputs (prefill)
// use cuBLAS for the projections. For steps of up to 16 tokens the logits row of a position is
// bitwise the same whatever the number of tokens in the call (see docs/cuda.md).
//
// This header includes no CUDA header: the implementation is behind a pointer. The library
// exists in two builds (docs/cuda.md): specdec::cuda (nvcc, real GPU) and specdec::cuda_emu (the
// same sources executed on the CPU by the project's emulator, for tests).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/config.hpp"
#include "specdec/model/dtype.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::cuda {

/// Number of CUDA devices this process can use (0 without a driver or device; the emulation
/// build reports its one emulated device, or none with SPECDEC_EMU_DEVICES=0).
int device_count();
/// Why device_count() is 0: cudaGetDeviceCount's error, e.g. "cudaErrorNoDevice: no
/// CUDA-capable device is detected" (empty when it reported none).
std::string device_count_error();

struct Options {
  enum class Weights : std::uint8_t { f16, bf16 };

  /// The 16-bit type of (1) matrices stored as F32 in the file (rounded on upload; every other
  /// matrix keeps its file's type and bytes on the device) and (2) the inputs of the prefill
  /// GEMMs (steps of more than 16 tokens, cuBLAS): the activations are rounded to it, and
  /// matrices of another type are dequantised to it, a chunk of rows at a time, before each
  /// product.
  Weights weights = Weights::f16;
  KvType kv_type = KvType::f16;       ///< KV cache element type (specdec/model/dtype.hpp)
  std::size_t context_length = 0;     ///< 0: the model's context length
  std::size_t max_step_tokens = 256;  ///< longer forward() inputs are processed in steps of this
  bool cuda_graphs = true;            ///< capture steps of <= 16 tokens once per shape and replay
  /// Prefill steps dequantise each matrix that is not already in the `weights` type into a
  /// scratch buffer of at most this many bytes, a chunk of rows at a time, before each cuBLAS
  /// product (0: 32 MiB; a chunk is at least one row). Smaller saves memory, larger makes fewer,
  /// larger products.
  std::size_t prefill_scratch_bytes = 0;
  int device = 0;
  /// Threads per block of the row-wise kernels and warps per block of the skinny GEMM (at most
  /// 32) and the attention. 0: the GPU defaults; the emulated tests pass small values to run
  /// faster.
  int norm_threads = 0;
  int gemm_warps = 0;
  int attention_warps = 0;
  /// Weight rows each lane of the skinny GEMM works on (1, 2 or 4; 0: by the matrix's rows,
  /// kernels/skinny_gemm.hpp). Every choice gives the same bits; bench_cuda compares them.
  int gemm_rows_per_lane = 0;
  /// Threads per block of the sampling kernels of a DeviceSampler over this model (0: 256).
  int sampling_threads = 0;
};

/// Work appended to a forward's last step, on the model's stream, and captured with it into the
/// step's CUDA graph (docs/cuda.md, section 6): enqueue(stream, logits) with the stream (a
/// cudaStream_t) and the device address of the forward's logits (rows x vocab). A replay repeats
/// the launches with the arguments fixed at capture, so whatever changes between replays must be
/// read from device memory. `key` (nonzero, unique to the owner of the buffers the work uses)
/// names the work's shape: it joins the step's graph key.
struct StepEpilogue {
  std::uint64_t key = 0;
  std::function<void(void* stream, const float* logits)> enqueue;
};

class Transformer {
 public:
  /// forward() returns device logits: decoders over this model sample with DeviceSampler.
  static constexpr Memory logits_memory = Memory::device;

  /// Uploads the weights (matrices as the file's bytes in any DType; F32 matrices rounded to
  /// Options::weights; norms and biases as f32) and allocates the KV cache. Throws
  /// specdec::Error on a missing tensor, a wrong shape, a row that does not hold whole blocks of
  /// its type, a type without kernels (naming the tensor and the type), or a CUDA error (named).
  Transformer(const ModelConfig& config, std::shared_ptr<const WeightStore> weights,
              Options options = {});
  explicit Transformer(const LoadedModel& model, Options options = {});
  ~Transformer();
  Transformer(Transformer&&) noexcept;
  Transformer& operator=(Transformer&&) noexcept;
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  /// Appends `tokens` after the cached prefix and returns one row of logits per token, in device
  /// memory, valid until the next call. Work is enqueued on stream(); the view may be used by
  /// further work on that stream (or after synchronize()). Throws specdec::Error, leaving the
  /// cache unchanged, on an empty span, a token id outside [0, vocab_size) or a context overflow.
  LogitsView forward(std::span<const token_t> tokens, const StepEpilogue* epilogue = nullptr);
  /// The same with token ids already in device memory (e.g. written by a sampling kernel: they
  /// are not validated on the host; an id outside the vocabulary gives NaN logits).
  LogitsView forward(DeviceTokens tokens, const StepEpilogue* epilogue = nullptr);

  /// Scores a token tree (TreeCausalLM, specdec/model/causal_lm.hpp): node i is tokens[i],
  /// parents[i] is -1 (it follows the cached prefix) or an earlier node. The nodes are scored in
  /// skinny steps of up to 16 (one step for a tree of up to 16 nodes). Row i of the device logits
  /// is bitwise what forward() of the path to node i gives in its last row when that forward
  /// runs in skinny steps too, as decoding and verification do (a path of more than 16 nodes:
  /// Options::max_step_tokens = 16). The attention reads each row's path in the plain forward's
  /// order; rotary positions by depth: docs/cuda.md. The nodes' K/V take the slots cached() ... in
  /// node order; cached() does not move. Throws specdec::Error, changing nothing, on an empty tree,
  /// more than max_tree_nodes nodes, bad parents, a token outside the vocabulary or slots past the
  /// context.
  LogitsView forward_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents);
  /// Adds nodes to the tree scored since the cache last changed and scores only them (parents
  /// index the whole tree); the rows are those forward_tree() of the whole tree would give.
  LogitsView extend_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents);
  /// Keeps the root-to-node path `path` of that tree as if forward() had appended its tokens:
  /// the nodes' K/V rows move into place on the device (O(path) copies), cached() advances by
  /// path.size(). Throws specdec::Error, changing nothing, without a tree or for a path that is
  /// not a chain from a root.
  void accept_path(std::span<const std::size_t> path);
  /// Nodes a tree may have: all of them are staged in the attention's shared memory (64 rows of
  /// K and V: 66 KiB at head_dim 128). Each step of a tree is a skinny step of at most 16 rows
  /// (kernels/skinny_gemm.hpp), never the prefill GEMMs, whose rounding is not the decode steps'.
  static constexpr std::size_t max_tree_nodes = 64;
  /// Nodes one step scores (a larger tree costs a step per 16 nodes): the default tree size
  /// (DecodeSetup::fitted_to) fits in one.
  static constexpr std::size_t tree_step_nodes = 16;

  /// Keeps the first n cached positions. O(1). Throws specdec::Error when n > cached().
  void rollback(std::size_t n);
  void reset() { rollback(0); }

  /// The last forward()'s logits copied to host memory (an internal buffer, valid until the next
  /// forward); waits for the GPU.
  LogitsView logits_to_host();
  /// Copies the last forward()'s logits into `out` (rows * vocab floats); waits for the GPU.
  void copy_logits_to_host(std::span<float> out);
  /// Waits until the work enqueued so far has finished.
  void synchronize();

  [[nodiscard]] std::size_t cached() const noexcept;
  [[nodiscard]] std::size_t vocab_size() const noexcept;
  [[nodiscard]] std::size_t context_length() const noexcept;
  [[nodiscard]] const ModelConfig& config() const noexcept;
  [[nodiscard]] const Options& options() const noexcept;
  /// The cudaStream_t all work is enqueued on (as void*: this header includes no CUDA header).
  [[nodiscard]] void* stream() const noexcept;
  /// Device bytes held: weights, KV cache, activation buffers.
  [[nodiscard]] std::size_t device_bytes() const noexcept;

  struct GraphStats {
    std::size_t captures = 0;  ///< graphs captured (one per step shape)
    std::size_t replays = 0;   ///< steps run by replaying a graph
    std::size_t direct = 0;    ///< steps launched kernel by kernel
  };
  [[nodiscard]] GraphStats graph_stats() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

static_assert(TreeCausalLM<Transformer>);

}  // namespace specdec::cuda

// The device sampler of sequences over this model (SamplerFor<Memory::device>).
#include "specdec/cuda/sampler.hpp"  // IWYU pragma: export
