// Host launch of the dynamic-parallelism engine's scheduler (internal to the
// runtime). Abseil-free; runtime.cc wraps it.
#pragma once

#include <cuda_runtime_api.h>

#include "baton/device_step.h"
#include "scheduler_params.h"

namespace baton::detail {

// Launches the one-warp scheduler kernel on `stream` with a plain launch
// (dynamic parallelism needs no graph around it). It decides, launches the
// step's kernels and then itself into the tail-launch stream, and so on until
// a decision ends the loop (report_exit). Work recorded on `stream` afterwards
// runs once that whole chain has finished.
[[nodiscard]] cudaError_t LaunchDynamicParallelismScheduler(const SchedulerParams* params,
                                                            const DeviceStepProgram& step,
                                                            cudaStream_t stream);

}  // namespace baton::detail
