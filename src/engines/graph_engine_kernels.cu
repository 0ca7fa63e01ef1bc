// The graph engines' scheduler nodes: the decision (scheduler/decide.cuh),
// then what each engine does with it. Each node is one warp (a single CTA of
// 32 threads) launched with programmatic dependent launch.
#include "baton/conditional_device.cuh"
#include "baton/device_launch.cuh"
#include "baton/step_kernel.cuh"
#include "carried_decision.cuh"
#include "scheduler/decide.cuh"
#include "scheduler_nodes_launch.h"

namespace baton::detail {
namespace {

constexpr int kSchedulerThreads = 32;

// Tail-launches the graph of `bucket`; on a refused launch the loop ends with
// the error reported (leader lane).
__device__ void launch_bucket(const SchedulerParams& p, cudaGraphExec_t exec) {
  if (tail_launch(exec, &p.counters->error_word)) {
    p.counters->device_launches += 1;
  } else {
    report_exit(p, EngineExit::kError);
  }
}

__global__ void __launch_bounds__(kSchedulerThreads)
    tail_launch_scheduler(const GraphEngineParams* params, bool after_inner) {
  // Launched with launch_step_kernel: we may start while the step's last
  // kernel still runs. The parameters are the host's, written before the
  // engine started, so their load overlaps that kernel; everything the step
  // wrote is read only after the wait.
  const GraphEngineParams e = *params;
  const SchedulerParams& p = e.scheduler;
  wait_for_previous_nodes();
  // Only the last node of a multi-step graph can find a carried decision.
  if (after_inner && decision_carried(e)) {
    if (lane_id() != 0) return;
    const std::uint32_t bucket = take_carried_decision(e);
    launch_bucket(p, p.buckets.entries[bucket].exec);
    return;
  }
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  if (decision.exit != EngineExit::kRunning) {
    report_exit(p, decision.exit);
    return;
  }
  // The scheduler never waits for its own launch: it launches and exits.
  launch_bucket(p, decision.exec);
}

__global__ void __launch_bounds__(kSchedulerThreads)
    tail_inner_scheduler(const GraphEngineParams* params, std::uint32_t body_bucket) {
  // The next node is the next step's first kernel: let it launch now, so its
  // launch latency hides behind this decision (it waits for our writes in its
  // own wait_for_previous_nodes; a kernel captured without PDL has a full
  // edge and is unaffected).
  allow_next_node();
  const GraphEngineParams e = *params;  // the host's: may load before the wait
  wait_for_previous_nodes();
  if (decision_carried(e)) return;  // the rest of the graph's steps stay empty
  const Decision decision = decide(e.scheduler);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  if (run && decision.bucket == body_bucket) return;  // the graph's next step runs it
  empty_next_step(e, /*carry=*/run);
}

__global__ void __launch_bounds__(kSchedulerThreads)
    conditional_scheduler(const GraphEngineParams* params, ConditionalRole role,
                          std::uint32_t body_bucket, bool after_inner) {
  // As in tail_inner_scheduler: a step kernel that follows us in the body
  // launches now and waits for our writes itself.
  allow_next_node();
  const GraphEngineParams e = *params;  // the host's: may load before the wait
  const SchedulerParams& p = e.scheduler;
  wait_for_previous_nodes();
  if (role == ConditionalRole::kOuter && decision_carried(e)) {
    // An inner node already decided this step (in another bucket): point the
    // SWITCH at it.
    if (lane_id() == 0) {
      set_switch_index(e.switch_handle, take_carried_decision(e));
      set_condition(e.while_handle, true);
    }
    return;
  }
  if (after_inner && decision_carried(e)) {
    // This body's inner node decided a step in another bucket: leave the
    // bucket's loop; the outer node launches it.
    if (lane_id() == 0 && role == ConditionalRole::kInner) {
      set_condition(e.stay_handles[body_bucket], false);
    }
    return;
  }
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  switch (role) {
    case ConditionalRole::kLoop:
      set_condition(e.while_handle, run);
      break;
    case ConditionalRole::kOuter:
      set_switch_index(e.switch_handle, run ? decision.bucket : kNoBucket);
      set_condition(e.while_handle, run);
      break;
    case ConditionalRole::kInner: {
      // Stay in this bucket's loop while the batch keeps fitting it; a
      // different bucket leaves the loop and lets the outer SWITCH pick it.
      const bool stay = run && decision.bucket == body_bucket;
      set_condition(e.stay_handles[body_bucket], stay);
      if (run && !stay) *e.carried = 1;
      if (!run) {
        set_switch_index(e.switch_handle, kNoBucket);
        set_condition(e.while_handle, false);
      }
      break;
    }
  }
  if (!run) report_exit(p, decision.exit);
}

}  // namespace

cudaError_t EnqueueTailLaunchScheduler(const GraphEngineParams* params, cudaStream_t stream,
                                       bool after_inner) {
  return launch_step_kernel(tail_launch_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, after_inner);
}

cudaError_t EnqueueTailInnerScheduler(const GraphEngineParams* params, std::uint32_t body_bucket,
                                      cudaStream_t stream) {
  return launch_step_kernel(tail_inner_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, body_bucket);
}

cudaError_t EnqueueConditionalScheduler(const GraphEngineParams* params, ConditionalRole role,
                                        std::uint32_t body_bucket, cudaStream_t stream,
                                        bool after_inner) {
  return launch_step_kernel(conditional_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, role, body_bucket, after_inner);
}

}  // namespace baton::detail
