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

}  // namespace baton::test
