#include "baton/conditional_device.cuh"
#include "baton/step_launch.cuh"
#include "scheduler.cuh"
#include "scheduler_launch.h"

namespace baton::detail {
namespace {

// One warp: the whole scheduler is a single CTA of 32 threads.
constexpr int kSchedulerThreads = 32;

__global__ void __launch_bounds__(kSchedulerThreads)
    tail_launch_scheduler(const SchedulerParams* params) {
  // Launched with launch_step_kernel: we may start while the step's last
  // kernel still runs, so wait for its results before reading them.
  wait_for_previous_nodes();
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
  wait_for_previous_nodes();
  const SchedulerParams p = *params;
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  if (p.has_switch != 0) set_switch_index(p.switch_handle, run ? decision.bucket : kNoBucket);
  set_condition(p.while_handle, run);
  if (!run) report_exit(p, decision.exit);
}

}  // namespace

cudaError_t EnqueueTailLaunchScheduler(const SchedulerParams* params, cudaStream_t stream) {
  return launch_step_kernel(tail_launch_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params);
}

cudaError_t EnqueueConditionalScheduler(const SchedulerParams* params, cudaStream_t stream) {
  return launch_step_kernel(conditional_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params);
}

}  // namespace baton::detail
