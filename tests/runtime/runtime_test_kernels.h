// The step program runtime_gpu_test drives, behind a plain C++ interface.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/step_args.h"

namespace baton::test {

// The value a countdown item reports when it finishes.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t CountdownValue(std::uint32_t id,
                                                                       std::uint32_t steps) {
  return id * 2654435761u ^ steps;
}

// One step of the countdown program, sized for `bucket_size`: every active
// item bumps runs[item.id] and finishes once it has run item.payload steps.
[[nodiscard]] cudaError_t EnqueueCountdownStep(const StepArgs& args, std::uint32_t bucket_size,
                                               std::uint32_t* runs, cudaStream_t stream);

// The same countdown as two kernels launched with baton::launch_step_kernel
// (programmatic dependent launch): the first writes each item's remaining
// steps to scratch[slot], the second reads them after
// wait_for_previous_nodes() and finishes items at zero. Without that wait the
// second could read a stale value and finish an item at the wrong step.
[[nodiscard]] cudaError_t EnqueueTwoKernelCountdownStep(const StepArgs& args,
                                                        std::uint32_t bucket_size,
                                                        std::uint32_t* runs, std::uint32_t* scratch,
                                                        cudaStream_t stream);

// The first time it runs (*flag == 0), tail-launches the graph it runs in
// (a self-launch) and sets *flag to 1, or to 2 if that launch was refused.
// Inside a step this uses the one pending self-launch a graph may have, so
// the scheduler's tail launch of the same bucket graph after it is refused.
[[nodiscard]] cudaError_t EnqueueSelfLaunchOnce(std::uint32_t* flag, cudaStream_t stream);

}  // namespace baton::test
