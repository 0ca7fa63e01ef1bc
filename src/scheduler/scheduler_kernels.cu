#include "baton/conditional_device.cuh"
#include "scheduler.cuh"
#include "scheduler_launch.h"

namespace baton::detail {
namespace {

// One warp: the whole scheduler is a single CTA of 32 threads.
constexpr int kSchedulerThreads = 32;

__global__ void __launch_bounds__(kSchedulerThreads)
    tail_launch_scheduler(const SchedulerParams* params) {
  // Launched with programmatic stream serialization: we may start while the
  // step's last kernel still runs; wait for its results before reading them.
  cudaGridDependencySynchronize();
  const SchedulerParams p = *params;
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  if (decision.exit != EngineExit::kRunning) {
    report_exit(p, decision.exit);
    return;
  }
  // The scheduler never waits for its own launch: it launches and exits.
  if (tail_launch(decision.exec, &p.counters->error_word)) {
    p.counters->device_launches += 1;
  } else {
    report_exit(p, EngineExit::kError);
  }
}

__global__ void __launch_bounds__(kSchedulerThreads)
    conditional_scheduler(const SchedulerParams* params) {
  cudaGridDependencySynchronize();
  const SchedulerParams p = *params;
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  set_switch_index(p.switch_handle, run ? decision.bucket : kNoBucket);
  set_condition(p.while_handle, run);
  if (!run) report_exit(p, decision.exit);
}

// Programmatic dependent launch (Hopper): the scheduler node may begin
// launching before the node it follows has finished, hiding part of the
// per-node launch latency; measured to work inside device-launched graphs
// (launch_comparison, "fused + programmatic launch").
template <typename Kernel>
cudaError_t LaunchScheduler(Kernel kernel, const SchedulerParams* params, cudaStream_t stream) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(kSchedulerThreads);
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, params);
}

}  // namespace

cudaError_t EnqueueTailLaunchScheduler(const SchedulerParams* params, cudaStream_t stream) {
  return LaunchScheduler(tail_launch_scheduler, params, stream);
}

cudaError_t EnqueueConditionalScheduler(const SchedulerParams* params, cudaStream_t stream) {
  return LaunchScheduler(conditional_scheduler, params, stream);
}

}  // namespace baton::detail
