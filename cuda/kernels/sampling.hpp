#pragma once
// The sampling kernels: logits -> processed distributions, argmax, draft-token sampling and the
// fused chain verification of B sequences (FlashInfer's chain_speculative_sampling layout, the
// same as include/specdec/sampling/batch.hpp):
//   q         B x k x V      draft distributions
//   draft     B x k          drafted tokens
//   p         B x (k+1) x V  target distributions (or target logits, through verify_from_logits)
//   accepted  B              n_b
//   emitted   B x (k+1)      x_0 ... x_(n_b - 1), next_b, then -1
// Sequence b draws its uniforms from stream b of `seed` at counters counter + 0 ... counter + k:
// the sampling core's convention (docs/math.md, section 7). Given the same p, q and drafted
// tokens, verify_chain makes bit for bit the decisions of the host's verify_chain_batch
// (cuda/common/sampling.cuh explains how). All pointers are device pointers; `threads` is the
// block size (a multiple of 32; one block per row or sequence).

#include <cuda_runtime.h>

#include <cstdint>

#include "specdec/common.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/tree_verify.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec::cuda::kernels {

/// The per-call values of the sampling kernels: processing parameters and the Philox uniforms'
/// (seed, stream, counter). Launched directly they travel as kernel arguments (the overloads
/// below that take them by value). A kernel captured into a CUDA graph replays the arguments it
/// was captured with, so the overloads taking `const RoundArgs*` read them from device memory at
/// run time instead; cuda::DeviceSampler writes them there once per round and captures its
/// kernels into the models' step graphs (docs/cuda.md, section 7).
struct RoundArgs {
  sampling::SamplingParams params{};
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;   ///< Philox stream of row (or sequence) 0; row r uses stream + r
  std::uint64_t counter = 0;  ///< Philox counter of the call
};

/// probs[r] = the processed distribution of logits[r] (rows x vocab), as process_logits on the
/// host; bad_logit[r] = -1, or the index of the first NaN / infinite logit of the row (then
/// probs[r] is unspecified).
void process_logits(const float* logits, int rows, int vocab,
                    const sampling::SamplingParams& params, float* probs, int* bad_logit,
                    cudaStream_t stream, int threads = 256);

/// out[r] = the index of the largest entry of x[r] (the lowest index on ties).
void argmax_rows(const float* x, int rows, int vocab, token_t* out, cudaStream_t stream,
                 int threads = 256);

/// Draft sampling, one row per sequence: q[r] = processed(logits[r]) and tokens[r] = a sample of
/// q[r] with the uniform philox_uniform(seed, stream_base + r, counter) (greedy: the argmax, no
/// uniform), exactly as the host's process_logits + sample_from given that q. bad_logit as in
/// process_logits (then tokens[r] = -1).
void sample_rows(const float* logits, int rows, int vocab, const sampling::SamplingParams& params,
                 std::uint64_t seed, std::uint64_t stream_base, std::uint64_t counter, float* q,
                 token_t* tokens, int* bad_logit, cudaStream_t stream, int threads = 256);

/// verify_chain for B sequences; outcome[b] carries sequence b's error (VerifyError::none when
/// the inputs were valid), as verify_chain_row reports it.
void verify_chain(const float* p, const float* q, const token_t* draft, int batch, int k, int vocab,
                  std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                  token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                  int threads = 256);

/// verify_chain_onehot for B sequences (point-mass proposals: no q).
void verify_chain_onehot(const float* p, const token_t* draft, int batch, int k, int vocab,
                         std::uint64_t seed, std::uint64_t counter, std::int32_t* accepted,
                         token_t* emitted, sampling::VerifyOutcome* outcome, cudaStream_t stream,
                         int threads = 256);

/// verify_chain_greedy for B sequences. With rows_are_logits the rows are the target's raw
/// logits (greedy processing is an argmax, so no distribution is needed; rows are only checked
/// for NaN / infinity); otherwise they are distributions, checked as the host checks them.
void verify_chain_greedy(const float* rows, bool rows_are_logits, const token_t* draft, int batch,
                         int k, int vocab, std::int32_t* accepted, token_t* emitted,
                         sampling::VerifyOutcome* outcome, cudaStream_t stream, int threads = 256);

// ---- the same kernels with their per-call values in device memory (graph-capturable)

/// process_logits with args->params; bad_value[r] (if not null) = the offending logit.
void process_logits(const float* logits, int rows, int vocab, const RoundArgs* args, float* probs,
                    int* bad_logit, float* bad_value, cudaStream_t stream, int threads = 256);

/// The per-round values of a cuda::DeviceSampler, in device memory: both streams' arguments and
/// the slot of the next drafted token, which draft_sample advances (so that one captured graph
/// serves every slot).
struct SamplerRound {
  RoundArgs draft;        ///< the draft stream, counter of slot 0 (slot s draws at counter + s)
  RoundArgs target;       ///< the target stream, counter of this round's verify
  std::int32_t slot = 0;  ///< next drafted token's slot; each draft_sample advances it
};

/// Draft sampling of one row for a DeviceSampler: s = round->slot; q[s] = processed(logits row),
/// tokens[s] = a sample of it (uniform at (draft.seed, draft.stream, draft.counter + s); greedy:
/// the argmax), bad_logit[s] / bad_value[s] as in process_logits; then round->slot = s + 1.
void draft_sample(const float* logits, int vocab, SamplerRound* round, float* q, token_t* tokens,
                  int* bad_logit, float* bad_value, cudaStream_t stream, int threads = 256);

/// verify_chain (q not null) or verify_chain_onehot (q null) with sequence b on stream
/// args->stream + b at counters args->counter + 0 ... k.
void verify_chain(const float* p, const float* q, const token_t* draft, int batch, int k, int vocab,
                  const RoundArgs* args, std::int32_t* accepted, token_t* emitted,
                  sampling::VerifyOutcome* outcome, cudaStream_t stream, int threads = 256);

/// Token-tree verification of one sequence with point-mass proposals (a TreeDrafter's tree;
/// sampling/tree_verify.hpp): tokens, parents n (node 0 the sequence's last token, parents[0] =
/// -1); rows n x V: with `greedy` the target's raw logits (the argmax walk,
/// verify_tree_greedy_loop), otherwise its processed distributions (verify_tree_loop on stream
/// args->stream at counters args->counter + 0 ... n - 1; scratch: V floats, written when a node
/// with several children rejects one). One block; *outcome = the result or its error.
void verify_tree(const float* rows, bool greedy, const token_t* tokens, const std::int32_t* parents,
                 int n, int vocab, const RoundArgs* args, float* scratch,
                 sampling::TreeVerifyOutcome* outcome, cudaStream_t stream, int threads = 256);

/// Copies B outcomes to the host (waiting for the stream) and throws specdec::Error for the first
/// sequence with an error, naming it, like the host's batched entry points.
void throw_on_error(const sampling::VerifyOutcome* outcome, int batch, const char* what,
                    cudaStream_t stream);

}  // namespace specdec::cuda::kernels
