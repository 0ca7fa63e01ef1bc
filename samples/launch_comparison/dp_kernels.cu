// Dynamic parallelism: the raw mechanism lives in Baton's separately compiled
// library (baton_dp, dp_floor.h): one executable holds only one device link
// with cudadevrt, and the DP engine's is that one.
#include "fixtures/dp_floor.h"
#include "launch_comparison/loop_state.h"

namespace baton::samples {

cudaError_t LaunchDynamicParallelismLoop(LoopState* state, int kernels, cudaStream_t stream) {
  detail::DpFloorLoop loop;
  loop.steps_done = &state->steps_done;
  loop.target = &state->target;
  loop.values = state->values;
  loop.error_word = &state->error_word;
  return detail::LaunchDynamicParallelismFloor(loop, kernels, stream);
}

}  // namespace baton::samples
