// Token-tree verification of one sequence (see sampling.hpp): the sampling core's tree loop
// (sampling/tree_verify.hpp) in every thread of one block, as verify.cu runs the chain's loop.
// The acceptance tests are scalar comparisons every thread evaluates; the row that ends the round
// is sampled block-wide (the chain's BlockRowSampler) and greedy walks scan rows with the
// block-wide argmax, so those cost what a chain's do. When a node with several children rejects
// one, the residual is materialised in `scratch`, totalled and finally sampled by the block too
// (BlockRowSampler's row passes: each thread a share of the row, the sums in the core's lane
// order, so the bits are the serial loop's). (That path's row statistics use a little stack, so
// this kernel is not among the no-local-memory hot kernels.)
#include "common/check.hpp"
#include "common/sampling.cuh"
#include "kernels/sampling.hpp"
#include "specdec/sampling/tree_verify.hpp"

namespace specdec::cuda::kernels {

namespace {

__global__ void verify_tree_kernel(const float* rows, bool greedy, const token_t* tokens,
                                   const std::int32_t* parents, int n, int vocab,
                                   const RoundArgs* args, float* scratch,
                                   sampling::TreeVerifyOutcome* outcome) {
  SPECDEC_DYNAMIC_SHARED(float, sums);
  const auto N = static_cast<std::size_t>(n);
  const auto V = static_cast<std::size_t>(vocab);
  sampling::TreeVerifyOutcome out;
  if (greedy) {
    out = sampling::verify_tree_greedy_loop(rows, tokens, parents, N, V,
                                            sampling_device::BlockGreedyScan{vocab, true});
  } else {
    const RoundArgs a = *args;
    const sampling::PhiloxUniforms uniform{a.seed, a.stream, a.counter};
    out = sampling::verify_tree_loop(rows, static_cast<const float*>(nullptr), tokens, parents, N,
                                     V, sampling::TreeProposal::point_mass, uniform, scratch,
                                     sampling_device::BlockRowSampler{vocab, sums});
  }
  if (threadIdx.x == 0) *outcome = out;
}

}  // namespace

void verify_tree(const float* rows, bool greedy, const token_t* tokens, const std::int32_t* parents,
                 int n, int vocab, const RoundArgs* args, float* scratch,
                 sampling::TreeVerifyOutcome* outcome, cudaStream_t stream, int threads) {
  if (n < 1) throw Error("verify_tree: a tree has at least its root");
  sampling_device::check_sampling_launch("verify_tree", vocab, threads);
  const std::size_t smem = sampling_device::row_sampler_shared_bytes(vocab);
  launch(verify_tree_kernel, dim3(1), dim3(static_cast<unsigned>(threads)), smem, stream, rows,
         greedy, tokens, parents, n, vocab, args, scratch, outcome);
  SPECDEC_CUDA_CHECK_LAUNCH("verify_tree_kernel");
}

}  // namespace specdec::cuda::kernels
