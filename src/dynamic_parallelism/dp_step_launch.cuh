// What the dynamic-parallelism scheduler calls to launch one step of a device
// step program (separately compiled code only: baton_dp). Each kind has one
// launch function in its own .cu file; dp_step_dispatch.cu picks it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "baton/device_step.h"
#include "baton/step_args.h"

namespace baton::detail {

struct DeviceStepLaunch {
  cudaError_t error = cudaSuccess;  // the first launch that failed, if any
  std::uint32_t launches = 0;       // kernels launched (all of them when error is cudaSuccess)
  bool known_kind = true;           // false: no launch function for this kind
};

// Called by one thread: launches the step's kernels into cudaStreamTailLaunch
// (they run in order after the calling grid), sized for `batch` active items.
// Stops at the first launch CUDA refuses.
[[nodiscard]] __device__ DeviceStepLaunch launch_device_step(const DeviceStepProgram& step,
                                                             const StepArgs& args,
                                                             std::uint32_t batch);

// One per kind.
[[nodiscard]] __device__ DeviceStepLaunch launch_synthetic_step(const StepArgs& args,
                                                                const void* params,
                                                                std::uint32_t batch);
[[nodiscard]] __device__ DeviceStepLaunch launch_decoder_step(const StepArgs& args,
                                                              const void* params,
                                                              std::uint32_t batch);

}  // namespace baton::detail
