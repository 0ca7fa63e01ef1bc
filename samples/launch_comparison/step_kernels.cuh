// The tiny step kernel, shared by the graph-based modes and the dynamic-
// parallelism mode (compiled into both the whole-program and the -rdc parts).
#pragma once

#include "launch_comparison/loop_state.h"

namespace baton::samples {
// Internal linkage: both the whole-program and the -rdc translation units get
// their own copy, with no duplicate symbol at either link.
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
