// The scheduler's decision, shared by every engine: run by one warp between
// two steps. It retires what the last step finished (into the completion
// mailbox), compacts the batch, admits new work from the queue, plans the
// next step's tokens, picks the bucket and writes the next step's header:
// the batch policy of baton/batch_policy.h. Engines differ only in how they
// act on the decision (tail launch, or set the conditional handles).
#pragma once

#include <cuda/atomic>

#include "baton/device_error_word.h"
#include "baton/work_queue.cuh"
#include "completion/completion_mailbox.cuh"
#include "scheduler/batch_ops.cuh"
#include "scheduler/lockstep_step.cuh"
#include "scheduler/page_ops.cuh"
#include "scheduler/scheduler_params.h"
#include "trace/trace_writer.cuh"

namespace baton::detail {

struct Decision {
  std::uint32_t bucket = kNoBucket;  // the bucket to run when exit == kRunning
  EngineExit exit = EngineExit::kRunning;
  cudaGraphExec_t exec = nullptr;  // that bucket's graph (tail-launch engine)
};

// This GPU's own decision (decide() below adds tensor parallelism's lockstep).
// Called by all 32 lanes of the scheduler's warp; every lane gets the same
// decision. Between two steps this is the whole device-side cost of the loop,
// so the independent loads are issued together up front and overlap, and the
// common cases (nothing finished, a small bucket table) avoid dependent
// round trips to L2.
[[nodiscard]] __device__ inline Decision decide_here(const SchedulerParams& p) {
  SchedulerCounters& counters = *p.counters;
  const unsigned lane = lane_id();
  const bool leader = lane == 0;
  std::uint32_t batch = p.book.counts->batch;
  const bool paged = p.pages.paged();
  std::uint32_t held = paged ? p.book.counts->held : 0;  // items waiting for pages
  const FirstRound first = load_first_round(p.args);
  const std::uint32_t step_pending = counters.step_pending;
  const std::uint32_t error_word = counters.error_word;
  // Volatile: the host rewrites these through the copy engine while we run.
  const volatile SchedulerControl* control = p.control;
  const bool abort = control->abort != 0;
  const bool stop = control->stop != 0;
  TraceCursor trace = trace_open(p.observers.trace, leader);
  // Small tables (the usual case): lane i holds bucket i.
  const bool small_table = p.buckets.count <= 32;
  std::uint32_t lane_size = 0;
  cudaGraphExec_t lane_exec = nullptr;
  if (small_table && lane < p.buckets.count) {
    lane_size = p.buckets.entries[lane].bucket_size;
    lane_exec = p.buckets.entries[lane].exec;
  }

  // After a device error the loop is over: a graph someone else still
  // launches (e.g. a step's own tail launch) must not run the loop on.
  if (error_word != 0) return Decision{kNoBucket, EngineExit::kError, nullptr};
  // Every return below publishes the events this decision traced.
  auto decided = [&trace](Decision decision) {
    trace_close(trace);
    return decision;
  };

  PlanLane plan;  // this lane's position, for the token plan (known in registers or not)
  if (step_pending != 0) {
    const std::uint32_t retiring = warp_collect_retired(p.args, p.book, batch, first);
    int published = 1;
    if (retiring > 0 && leader) published = mailbox_try_push(p.mailbox, p.book.retired, retiring);
    published = __shfl_sync(kFullWarp, published, 0);
    // A full mailbox: change nothing, park; Poll frees room and relaunches,
    // and this step's retirement is retried then.
    if (!published) return decided(Decision{kNoBucket, EngineExit::kMailboxFull, nullptr});
    if (retiring > 0) {
      if (paged) warp_release_pages(p.pages, p.args, p.book, batch);
      batch = warp_compact(p.args, p.book, batch);
    } else {
      warp_advance(p.args, batch, first);
      // Positions stayed: each lane's item and its tokens so far are known.
      plan.known = batch <= 32;
      plan.input = first.input;
      plan.ran = first.item_tokens + first.tokens;
    }
    if (leader) {
      counters.retired += retiring;
      counters.step_pending = 0;
      trace_record(trace, TraceEventType::kStepEnd, counters.steps - 1, retiring, batch);
    }
    __syncwarp();
  }

  if (abort) return decided(Decision{kNoBucket, EngineExit::kAborted, nullptr});

  const std::uint32_t batch_before = batch;
  // Paged: the items already taken from the queue that wait for pages come
  // first (even when stopping: they left the queue), and nothing is popped
  // while one still waits (baton/page_policy.h: no item passes another).
  bool holding = false;
  if (paged) {
    batch = warp_admit_held(p.pages, p.args, p.book, batch, held);
    holding = held != 0;
  }
  if (!stop && !holding) {
    // Fill free slots a warp-batched pop at a time; stop at the first short
    // claim (the queue is empty for now).
    for (;;) {
      const std::uint32_t room = p.args.max_batch - batch;
      if (room == 0) break;
      const std::uint32_t want = room < 32u ? room : 32u;
      const LaneItems<1> popped = pop_warp_batch<1>(p.queue, want);
      const bool valid = popped.item[0].is_valid();
      if (paged) {
        batch = warp_offer_popped(p.pages, p.args, p.book, batch, popped.item[0], valid, holding);
        if (leader) counters.admitted += popped.claimed;
        if (holding || popped.claimed < want) break;
        continue;
      }
      // The admitted lanes (the first `claimed`) land at positions batch + lane.
      const unsigned from = lane - (batch % 32u);
      const WorkItem joining = popped.item[0];
      const std::uint32_t joining_input = InputTokens(joining);
      const std::uint32_t here_input = __shfl_sync(kFullWarp, joining_input, from & 31u);
      if (plan.known && lane >= batch && lane < batch + popped.claimed) {
        plan.input = here_input;
        plan.ran = 0;
      }
      plan.known = plan.known && batch + popped.claimed <= 32;
      batch = warp_admit(p.args, p.book, batch, joining, valid);
      if (leader) counters.admitted += popped.claimed;
      if (popped.claimed < want) break;
    }
  }
  if (leader && batch != batch_before) {
    trace_record(trace, TraceEventType::kAdmit, counters.steps, batch - batch_before, batch);
  }
  // Paged admissions leave the joining lanes' state unknown in registers.
  if (paged && batch != batch_before) plan.known = false;

  if (batch == 0) {
    return decided(Decision{kNoBucket, stop ? EngineExit::kDrained : EngineExit::kIdle, nullptr});
  }
  std::uint32_t first_tokens = 0;
  const std::uint32_t rows = warp_plan_tokens(p.policy, p.args, batch, plan, first_tokens);
  if (paged) {
    // With every position's tokens known in registers, a step that starts
    // no new page (most decode steps: one in page_tokens does) maps nothing.
    bool maps = true;
    if (plan.known) {
      const bool grows = lane < batch && PagesFor(p.pages, std::uint64_t{plan.ran} + first_tokens) >
                                             PagesFor(p.pages, plan.ran);
      maps = __ballot_sync(kFullWarp, grows) != 0;
    }
    if (maps) warp_map_pages(p.pages, p.args, p.book, batch);
  }
  const std::uint32_t need = StepCapacityNeeded(batch, rows);
  int bucket = -1;
  std::uint32_t bucket_size = 0;
  cudaGraphExec_t exec = nullptr;
  if (small_table) {
    const unsigned fits = __ballot_sync(kFullWarp, lane < p.buckets.count && lane_size >= need);
    bucket = fits != 0 ? __ffs(fits) - 1 : -1;
    const int from = bucket < 0 ? 0 : bucket;
    bucket_size = __shfl_sync(kFullWarp, lane_size, from);
    exec = reinterpret_cast<cudaGraphExec_t>(
        __shfl_sync(kFullWarp, reinterpret_cast<unsigned long long>(lane_exec), from));
  } else {
    bucket = p.buckets.choose(need);
    if (bucket >= 0) {
      bucket_size = p.buckets.entries[bucket].bucket_size;
      exec = p.buckets.entries[bucket].exec;
    }
  }
  if (bucket < 0) {
    // The host validates max_batch and the token budget against the largest
    // bucket, so this is a broken invariant, reported rather than run.
    if (leader) {
      record_device_error(&counters.error_word, DeviceErrorSite::kSchedulerState, need);
    }
    return decided(Decision{kNoBucket, EngineExit::kError, nullptr});
  }
  if (leader) {
    StepHeader& header = *p.args.header;
    header.step = counters.steps;
    header.batch = batch;
    header.bucket = static_cast<std::uint32_t>(bucket);
    header.bucket_size = bucket_size;
    header.tokens = rows;
    p.book.counts->rows = rows;
    trace_record(trace, TraceEventType::kStepBegin, counters.steps, batch,
                 static_cast<std::uint32_t>(bucket));
    counters.steps += 1;
    counters.step_pending = 1;
  }
  __syncwarp();
  return decided(Decision{static_cast<std::uint32_t>(bucket), EngineExit::kRunning, exec});
}

// The scheduler's decision on every engine. With tensor-parallel ranks in
// lockstep (SchedulerLockstep), rank 0 decides here and publishes the
// decision, and every other rank takes rank 0's next one
// (scheduler/lockstep_step.cuh).
[[nodiscard]] __device__ inline Decision decide(const SchedulerParams& p) {
  if (!p.lockstep.on()) return decide_here(p);
  if (p.lockstep.rank == 0) {
    Decision decision = decide_here(p);
    decision.exit = lead_step(p, decision.exit);
    if (decision.exit != EngineExit::kRunning) decision.bucket = kNoBucket;
    return decision;
  }
  Decision decision;
  decision.exit = follow_step(p, &decision.bucket);
  if (decision.exit == EngineExit::kRunning) {
    decision.exec = p.buckets.entries[decision.bucket].exec;
  } else {
    decision.bucket = kNoBucket;
  }
  return decision;
}

// Publishes why the loop ended. Leader lane only. The status block is mapped
// host memory: plain stores, then `exits` with a system-scope release so the
// host never sees a new epoch with old fields.
__device__ inline void report_exit(const SchedulerParams& p, EngineExit why) {
  SchedulerCounters& counters = *p.counters;
  if (counters.error_word != 0) why = EngineExit::kError;
  EngineStatus& status = *p.status;
  status.reason = static_cast<std::uint32_t>(why);
  status.error_word = counters.error_word;
  status.batch = p.book.counts->batch;
  status.steps = counters.steps;
  status.admitted = counters.admitted;
  status.retired = counters.retired;
  status.device_launches = counters.device_launches;
  TraceCursor trace = trace_open(p.observers.trace, /*leader=*/true);
  if (counters.error_word != 0) {
    trace_record(trace, TraceEventType::kError, counters.steps, counters.error_word, 0);
  }
  trace_record(trace, TraceEventType::kExit, counters.steps, static_cast<std::uint32_t>(why),
               status.batch);
  trace_close(trace);
  counters.exits += 1;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(status.exits)
      .store(counters.exits, cuda::std::memory_order_release);
}

}  // namespace baton::detail
