// The state a launch_comparison step works on, shared by every way of driving
// the loop. Abseil-free: the kernels include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/step_args.h"

namespace baton::samples {

inline constexpr int kMaxStepKernels = 32;

struct LoopState {
  std::uint32_t steps_done;  // bumped by the last kernel of every step
  std::uint32_t target;      // the device stops once steps_done reaches it
  std::uint32_t error_word;  // first device-launch failure (baton/device_error_word.h)
  std::uint32_t pad;
  std::uint32_t values[kMaxStepKernels];  // kernel i folds its step into values[i]
};

// Kernel i of a step computes values[i] = values[i] * 3 + (i + 1): a chain the
// host can recompute, so a skipped or repeated kernel shows.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t NextValue(std::uint32_t value, int kernel) {
  return value * 3u + static_cast<std::uint32_t>(kernel + 1);
}

// Enqueues one step: `kernels` tiny kernels in order; the last bumps steps_done.
[[nodiscard]] cudaError_t EnqueueStepKernels(LoopState* state, int kernels, cudaStream_t stream);

// The same step as a Baton step program: the last kernel also finishes the
// runtime's item (batch 1) once steps_done reaches the item's payload. Its
// kernels are launched with baton::launch_step_kernel (programmatic
// dependent launch), as a step program should.
[[nodiscard]] cudaError_t EnqueueEngineStepKernels(LoopState* state, int kernels,
                                                   const StepArgs& args, cudaStream_t stream);

// Separate scheduler graph: if steps_done < target, tail-launch `step` and then
// this scheduler's own graph (two device launches per step).
[[nodiscard]] cudaError_t EnqueueSeparateScheduler(cudaGraphExec_t step, LoopState* state,
                                                   cudaStream_t stream);

// Scheduler fused as the last node of the step graph: if steps_done < target,
// tail-launch the graph it runs in (one device launch per step).
[[nodiscard]] cudaError_t EnqueueFusedScheduler(LoopState* state, cudaStream_t stream);

// The fused shape with programmatic dependent launch (Hopper): every kernel
// of the step, and the scheduler after them, is captured with programmatic
// stream serialization, so each may start launching while its predecessor
// runs and waits (griddepcontrol.wait) only before touching its results.
[[nodiscard]] cudaError_t EnqueueFusedStepWithPdl(LoopState* state, int kernels,
                                                  cudaStream_t stream);

// Persistent-kernel floor: one cooperative grid of `blocks` blocks runs every
// step itself, `kernels` grid-wide barriers per step, until steps_done reaches
// target.
[[nodiscard]] cudaError_t LaunchPersistentLoop(LoopState* state, int kernels, int blocks,
                                               cudaStream_t stream);

// Dynamic parallelism: a 1-thread kernel launches the step's `kernels` kernels
// and then itself into the tail-launch stream until steps_done reaches target.
// Runs Baton's separately compiled floor loop (dp_floor.h): one executable
// holds only one device link with cudadevrt, and baton_dp's is that one.
[[nodiscard]] cudaError_t LaunchDynamicParallelismLoop(LoopState* state, int kernels,
                                                       cudaStream_t stream);

}  // namespace baton::samples
