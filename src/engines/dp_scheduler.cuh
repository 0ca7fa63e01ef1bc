// The dynamic-parallelism engine's scheduler, for the libraries that provide
// a device step (baton/step_program.h, DeviceStepProgram). Device code can
// launch only kernels of its own device link, so each provider compiles this
// scheduler with separable compilation (-rdc) INTO ITS OWN device link, next
// to its step kernels, and hands the runtime DynamicParallelismLaunch<Step>
// as DeviceStepProgram::launch. A program may hold only one device link that
// uses the device runtime (a second one's launches fail with
// cudaErrorInvalidResourceHandle, docs/cuda-facts.md D3): the decoder model's
// library and the benchmark fixtures are two such links and are never linked
// into one program.
//
// `Step` provides
//   static __device__ DeviceStepLaunch launch(const StepArgs& args, const void* params,
//                                             std::uint32_t batch);
// which launches one step's kernels into cudaStreamTailLaunch (they run in
// order after the calling grid), sized for `batch` active items, stopping at
// the first launch CUDA refuses.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "baton/step_args.h"
#include "scheduler/decide.cuh"

namespace baton::detail {

struct DeviceStepLaunch {
  cudaError_t error = cudaSuccess;  // the first launch that failed, if any
  std::uint32_t launches = 0;       // kernels launched (all of them when error is cudaSuccess)
};

inline constexpr int kDynamicParallelismSchedulerThreads = 32;

template <class Step>
__global__ void __launch_bounds__(kDynamicParallelismSchedulerThreads)
    dynamic_parallelism_scheduler(const SchedulerParams* params, const void* step_params) {
  // Everything launched before this grid into the tail-launch stream (the last
  // step's kernels) has finished: tail launches run in order.
  const SchedulerParams p = *params;
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  if (decision.exit != EngineExit::kRunning) {
    report_exit(p, decision.exit);
    return;
  }
  SchedulerCounters& counters = *p.counters;
  // An empty step has nothing to run (and a grid of 0 blocks is refused).
  const std::uint32_t batch = p.args.header->batch;
  DeviceStepLaunch launched;
  if (batch > 0) launched = Step::launch(p.args, step_params, batch);
  counters.device_launches += launched.launches;
  cudaError_t error = launched.error;
  // Never relaunch after a refused launch: the loop ends here, and the host
  // sees why. At most one pending self-launch (docs/cuda-facts.md D6): this one.
  if (error == cudaSuccess) {
    dynamic_parallelism_scheduler<Step>
        <<<1, kDynamicParallelismSchedulerThreads, 0, cudaStreamTailLaunch>>>(params, step_params);
    error = cudaGetLastError();
    if (error == cudaSuccess) counters.device_launches += 1;
  }
  if (error != cudaSuccess) {
    record_device_error(&counters.error_word, DeviceErrorSite::kKernelLaunch,
                        static_cast<std::uint32_t>(error));
    report_exit(p, EngineExit::kError);
  }
}

// DeviceStepProgram::launch for `Step`: a plain host launch of the scheduler
// (dynamic parallelism needs no graph around it). Returns the launch's own
// status (a <<<>>> launch plus cudaGetLastError would also report an earlier,
// unrelated error left on this thread).
template <class Step>
cudaError_t DynamicParallelismLaunch(const void* scheduler, const void* step_params,
                                     cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kDynamicParallelismSchedulerThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, dynamic_parallelism_scheduler<Step>,
                            static_cast<const SchedulerParams*>(scheduler), step_params);
}

}  // namespace baton::detail
