// The tiny step kernel of the graph-based modes. (The raw dynamic-parallelism
// mode runs the same update in baton_dp's floor loop, dp_floor.h.)
#pragma once

#include "launch_comparison/loop_state.h"

namespace baton::samples {
// Internal linkage: each translation unit that includes it gets its own copy.
namespace {

// One warp, like a real decode step's smallest kernels; thread 0 does the
// dependent update so each kernel must see its predecessor's result.
__global__ void tiny_step_kernel(LoopState* state, int kernel, int last) {
  if (threadIdx.x != 0) return;
  state->values[kernel] = NextValue(state->values[kernel], kernel);
  if (last) state->steps_done += 1;
}

}  // namespace
}  // namespace baton::samples
