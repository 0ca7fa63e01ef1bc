// The dynamic-parallelism engine's scheduler: separately compiled (baton_dp),
// so that it can launch kernels from device code. It makes the same decision
// as every other engine (decide()), then acts on it by launching kernels.
#include "dp_scheduler_launch.h"
#include "dp_step_launch.cuh"
#include "scheduler.cuh"

namespace baton::detail {
namespace {

constexpr int kSchedulerThreads = 32;

__global__ void __launch_bounds__(kSchedulerThreads)
    dp_scheduler(const SchedulerParams* params, DeviceStepProgram step) {
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
  const DeviceStepLaunch launched = launch_device_step(step, p.args, p.args.header->batch);
  counters.device_launches += launched.launches;
  if (!launched.known_kind) {
    record_device_error(&counters.error_word, DeviceErrorSite::kSchedulerState,
                        static_cast<std::uint32_t>(step.kind));
    report_exit(p, EngineExit::kError);
    return;
  }
  cudaError_t error = launched.error;
  // Never relaunch after a refused launch: the loop ends here, and the host
  // sees why. At most one pending self-launch (../shared/DESIGN.md): this one.
  if (error == cudaSuccess) {
    dp_scheduler<<<1, kSchedulerThreads, 0, cudaStreamTailLaunch>>>(params, step);
    error = cudaGetLastError();
    if (error == cudaSuccess) counters.device_launches += 1;
  }
  if (error != cudaSuccess) {
    record_device_error(&counters.error_word, DeviceErrorSite::kKernelLaunch,
                        static_cast<std::uint32_t>(error));
    report_exit(p, EngineExit::kError);
  }
}

}  // namespace

cudaError_t LaunchDynamicParallelismScheduler(const SchedulerParams* params,
                                              const DeviceStepProgram& step, cudaStream_t stream) {
  // The launch's own status (a <<<>>> launch plus cudaGetLastError would also
  // report an earlier, unrelated error left on this thread).
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kSchedulerThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, dp_scheduler, params, step);
}

}  // namespace baton::detail
