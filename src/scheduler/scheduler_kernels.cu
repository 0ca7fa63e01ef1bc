#include "baton/conditional_device.cuh"
#include "baton/step_launch.cuh"
#include "scheduler.cuh"
#include "scheduler_launch.h"

namespace baton::detail {
namespace {

// One warp: the whole scheduler is a single CTA of 32 threads.
constexpr int kSchedulerThreads = 32;

__global__ void __launch_bounds__(kSchedulerThreads)
    tail_launch_scheduler(const SchedulerParams* params, bool after_inner) {
  // Launched with launch_step_kernel: we may start while the step's last
  // kernel still runs. The parameters are the host's, written before the
  // engine started, so their load overlaps that kernel; everything the step
  // wrote is read only after the wait.
  const SchedulerParams p = *params;
  wait_for_previous_nodes();
  SchedulerCounters& counters = *p.counters;
  // Only the last node of a two-step graph can find a carried decision; the
  // others skip the extra load.
  if (after_inner && counters.decision_carried != 0) {
    // The inner scheduler of this two-step graph decided a step in another
    // bucket and emptied our second step instead of running it: restore the
    // decided batch and launch that bucket's graph.
    if (lane_id() != 0) return;
    counters.decision_carried = 0;
    StepHeader& header = *p.args.header;
    header.batch = p.book.counts->batch;
    if (tail_launch(p.buckets.entries[header.bucket].exec, &counters.error_word)) {
      counters.device_launches += 1;
    } else {
      report_exit(p, EngineExit::kError);
    }
    return;
  }
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
    tail_inner_scheduler(const SchedulerParams* params, std::uint32_t body_bucket) {
  // The next node is the next step's first kernel: let it launch now, so its
  // launch latency hides behind this decision (it waits for our writes in its
  // own wait_for_previous_nodes; a kernel captured without PDL has a full
  // edge and is unaffected).
  allow_next_node();
  const SchedulerParams p = *params;  // the host's: may load before the wait
  wait_for_previous_nodes();
  // An earlier inner node of this graph carried a decision for another
  // bucket: the rest of the graph's steps stay empty until the tail launches it.
  if (p.counters->decision_carried != 0) return;
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  if (run && decision.bucket == body_bucket) return;  // the graph's next step runs it
  // The next step was captured for this bucket: it must not run a batch
  // decided for another (or a stale one after an exit decision). Empty it;
  // the tail scheduler launches the carried decision, or a later node decides
  // again (an exit decision changed nothing it would not redo).
  p.args.header->batch = 0;
  if (run) p.counters->decision_carried = 1;
}

__global__ void __launch_bounds__(kSchedulerThreads)
    conditional_scheduler(const SchedulerParams* params, ConditionalRole role,
                          std::uint32_t body_bucket, bool after_inner) {
  // As in tail_inner_scheduler: a step kernel that follows us in the body
  // launches now and waits for our writes itself.
  allow_next_node();
  const SchedulerParams p = *params;  // the host's: may load before the wait
  wait_for_previous_nodes();
  SchedulerCounters& counters = *p.counters;
  if (role == ConditionalRole::kOuter && counters.decision_carried != 0) {
    // An inner scheduler already decided this step (in another bucket); an
    // inner node between two steps of a body may have emptied the header's
    // batch meanwhile, so it is restored from the book.
    if (lane_id() == 0) {
      counters.decision_carried = 0;
      p.args.header->batch = p.book.counts->batch;
      set_switch_index(p.switch_handle, p.args.header->bucket);
      set_condition(p.while_handle, true);
    }
    return;
  }
  if (after_inner && counters.decision_carried != 0) {
    // This body's inner node (between its steps) decided a step in another
    // bucket: leave the bucket's loop; the outer scheduler launches it.
    if (lane_id() == 0 && role == ConditionalRole::kInner) {
      set_condition(p.stay_handles[body_bucket], false);
    }
    return;
  }
  const Decision decision = decide(p);
  if (lane_id() != 0) return;
  const bool run = decision.exit == EngineExit::kRunning;
  switch (role) {
    case ConditionalRole::kLoop:
      set_condition(p.while_handle, run);
      break;
    case ConditionalRole::kOuter:
      set_switch_index(p.switch_handle, run ? decision.bucket : kNoBucket);
      set_condition(p.while_handle, run);
      break;
    case ConditionalRole::kInner: {
      // Stay in this bucket's loop while the batch keeps fitting it; a
      // different bucket leaves the loop and lets the outer SWITCH pick it.
      const bool stay = run && decision.bucket == body_bucket;
      set_condition(p.stay_handles[body_bucket], stay);
      if (run && !stay) counters.decision_carried = 1;
      if (!run) {
        set_switch_index(p.switch_handle, kNoBucket);
        set_condition(p.while_handle, false);
      }
      break;
    }
  }
  if (!run) report_exit(p, decision.exit);
}

}  // namespace

cudaError_t EnqueueTailLaunchScheduler(const SchedulerParams* params, cudaStream_t stream,
                                       bool after_inner) {
  return launch_step_kernel(tail_launch_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, after_inner);
}

cudaError_t EnqueueTailInnerScheduler(const SchedulerParams* params, std::uint32_t body_bucket,
                                      cudaStream_t stream) {
  return launch_step_kernel(tail_inner_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, body_bucket);
}

cudaError_t EnqueueConditionalScheduler(const SchedulerParams* params, ConditionalRole role,
                                        std::uint32_t body_bucket, cudaStream_t stream,
                                        bool after_inner) {
  return launch_step_kernel(conditional_scheduler, dim3(1), dim3(kSchedulerThreads), 0, stream,
                            params, role, body_bucket, after_inner);
}

}  // namespace baton::detail
