#pragma once
// Where a sampling kernel finds its per-call values (kernels::RoundArgs: processing parameters,
// seed, Philox stream and counter). A kernel template takes one of these as its `args`
// parameter and calls args.get() once:
//   ImmediateArgs  the values themselves, as a kernel argument (direct launches);
//   DeviceArgs     a pointer to them in device memory plus a fixed counter offset, so that a CUDA
//                  graph captured once replays with the values the host wrote for this round.

#include "common/prelude.cuh"
#include "kernels/sampling.hpp"

namespace specdec::cuda::kernels {

struct ImmediateArgs {
  RoundArgs args;
  SPECDEC_DEVICE RoundArgs get() const { return args; }
};

struct DeviceArgs {
  const RoundArgs* args;
  std::uint64_t counter_offset = 0;
  SPECDEC_DEVICE RoundArgs get() const {
    RoundArgs a = *args;
    a.counter += counter_offset;
    return a;
  }
};

}  // namespace specdec::cuda::kernels
