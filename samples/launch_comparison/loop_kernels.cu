#include <cooperative_groups.h>

#include "baton/device_launch.cuh"
#include "baton/step_kernel.cuh"
#include "launch_comparison/step_kernels.cuh"

namespace baton::samples {
namespace {

__global__ void engine_step_kernel(LoopState* state, int kernel, int last, StepArgs args) {
  // Launched with launch_step_kernel (programmatic dependent launch).
  allow_next_node();
  wait_for_previous_nodes();
  // An empty step (a multi-step graph or loop body whose next step belongs to
  // another bucket, or to no step at all) does nothing, as runtime.h asks.
  if (threadIdx.x != 0) return;
  // Both loads issue together: checking for an empty step costs no round trip.
  const std::uint32_t batch = args.header->batch;
  const std::uint32_t value = state->values[kernel];
  if (batch == 0) return;
  state->values[kernel] = NextValue(value, kernel);
  if (!last) return;
  const std::uint32_t done = state->steps_done + 1;
  state->steps_done = done;
  if (done >= static_cast<std::uint32_t>(args.items[0].payload)) {
    finish_item(args, 0, done);
  }
}

__global__ void separate_scheduler(cudaGraphExec_t step, LoopState* state) {
  if (state->steps_done >= state->target) return;
  if (!tail_launch(step, &state->error_word)) return;
  (void)tail_launch(cudaGetCurrentGraphExec(), &state->error_word);
}

__global__ void fused_scheduler(LoopState* state) {
  if (state->steps_done >= state->target) return;
  (void)tail_launch(cudaGetCurrentGraphExec(), &state->error_word);
}

__global__ void tiny_step_kernel_pdl(LoopState* state, int kernel, int last) {
  // Let the next node start launching now; it waits for our results itself.
  allow_next_node();
  wait_for_previous_nodes();
  if (threadIdx.x != 0) return;
  state->values[kernel] = NextValue(state->values[kernel], kernel);
  if (last) state->steps_done += 1;
}

__global__ void fused_scheduler_pdl(LoopState* state) {
  wait_for_previous_nodes();
  if (state->steps_done >= state->target) return;
  (void)tail_launch(cudaGetCurrentGraphExec(), &state->error_word);
}

__global__ void persistent_loop(LoopState* state, int kernels) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  for (;;) {
    // The decision: every block reads the counter after the last barrier, so
    // all blocks agree.
    if (*static_cast<volatile std::uint32_t*>(&state->steps_done) >= state->target) return;
    grid.sync();  // nobody bumps the counter before everyone has read it
    for (int k = 0; k < kernels; ++k) {
      if (leader) {
        state->values[k] = NextValue(state->values[k], k);
        if (k == kernels - 1) state->steps_done += 1;
      }
      grid.sync();
    }
  }
}

}  // namespace

cudaError_t EnqueueStepKernels(LoopState* state, int kernels, cudaStream_t stream) {
  for (int k = 0; k < kernels; ++k) {
    tiny_step_kernel<<<1, 32, 0, stream>>>(state, k, k == kernels - 1);
  }
  return cudaGetLastError();
}

cudaError_t EnqueueEngineStepKernels(LoopState* state, int kernels, const StepArgs& args,
                                     cudaStream_t stream) {
  for (int k = 0; k < kernels; ++k) {
    const cudaError_t error = launch_step_kernel(engine_step_kernel, dim3(1), dim3(32), 0, stream,
                                                 state, k, k == kernels - 1 ? 1 : 0, args);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t EnqueueSeparateScheduler(cudaGraphExec_t step, LoopState* state, cudaStream_t stream) {
  separate_scheduler<<<1, 1, 0, stream>>>(step, state);
  return cudaGetLastError();
}

cudaError_t EnqueueFusedScheduler(LoopState* state, cudaStream_t stream) {
  fused_scheduler<<<1, 1, 0, stream>>>(state);
  return cudaGetLastError();
}

cudaError_t EnqueueFusedStepWithPdl(LoopState* state, int kernels, cudaStream_t stream) {
  for (int k = 0; k < kernels; ++k) {
    const cudaError_t error = launch_step_kernel(tiny_step_kernel_pdl, dim3(1), dim3(32), 0, stream,
                                                 state, k, k == kernels - 1 ? 1 : 0);
    if (error != cudaSuccess) return error;
  }
  return launch_step_kernel(fused_scheduler_pdl, dim3(1), dim3(1), 0, stream, state);
}

cudaError_t LaunchPersistentLoop(LoopState* state, int kernels, int blocks, cudaStream_t stream) {
  void* args[] = {&state, &kernels};
  return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_loop), dim3(blocks),
                                     dim3(32), args, 0, stream);
}

}  // namespace baton::samples
