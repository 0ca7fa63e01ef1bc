// Everything the scheduler's decision (scheduler/decide.cuh) reads and
// writes, plus the small control/status blocks it shares with the host. The
// engines wrap it with what only they need (engines/engine_params.h).
// Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/batch_policy.h"
#include "baton/bucket_entry.h"
#include "baton/completion.h"
#include "baton/engine.h"
#include "baton/page_policy.h"
#include "baton/step_args.h"
#include "baton/work_item.h"
#include "scheduler/batch_book.h"
#include "scheduler/lockstep_channel.h"
#include "trace/trace_ring_view.h"

namespace baton::detail {

// Host -> device requests, in DEVICE memory: the host writes them with an
// asynchronous copy on its control stream, so the scheduler reads them from
// L2 every step instead of across the bus.
struct SchedulerControl {
  std::uint32_t stop = 0;   // admit nothing new; exit once the batch is empty
  std::uint32_t abort = 0;  // exit at the next decision, work left in flight
};

// The scheduler's running totals, in device memory.
struct SchedulerCounters {
  unsigned long long steps = 0;            // steps launched
  unsigned long long admitted = 0;         // items taken from the queue
  unsigned long long retired = 0;          // items published to the mailbox
  unsigned long long device_launches = 0;  // tail launches made
  unsigned long long exits = 0;            // times the loop ended
  std::uint32_t step_pending = 0;          // a step was launched and not yet retired
  std::uint32_t error_word = 0;            // first device error (device_error_word.h)
  unsigned long long records = 0;          // lockstep records published (rank 0) or followed
  // Lockstep: 1 + the exit this engine run's end record carried (rank 0:
  // published; a follower: received), 0 before. A multi-step graph decides
  // again after an exit, at each of its remaining nodes: those decisions
  // repeat the end instead of publishing or waiting for another record. The
  // host clears it before each launch.
  std::uint32_t lockstep_ended = 0;
  std::uint32_t pad = 0;
};

// Device -> host, in MAPPED host memory: written once per exit (plain posted
// stores, then `exits` with a system-scope release), read by the host without
// synchronizing.
struct EngineStatus {
  alignas(64) unsigned long long exits = 0;
  std::uint32_t reason = 0;  // EngineExit
  std::uint32_t error_word = 0;
  std::uint32_t batch = 0;  // active items at the exit
  std::uint32_t pad = 0;
  unsigned long long steps = 0;
  unsigned long long admitted = 0;
  unsigned long long retired = 0;
  unsigned long long device_launches = 0;
};

inline constexpr std::uint32_t kNoBucket = 0xffffffffu;

// What the scheduler publishes for the host to watch the loop without
// synchronizing: when on, the device trace ring. (The watchdog needs nothing
// here: it reads the step counter through the copy engine.)
struct SchedulerObservers {
  TraceRing trace;
};

// Tensor parallelism's schedulers in lockstep (scheduler/lockstep_step.cuh,
// over scheduler/lockstep_channel.h): rank 0 decides every step and
// publishes it; every other rank's scheduler follows. ranks <= 1: off.
struct SchedulerLockstep {
  LockstepChannel* channel = nullptr;  // rank 0's device memory
  LockstepHalves halves;               // rank 0's device memory
  std::uint32_t* copy = nullptr;       // a follower's copy of one record (its own memory)
  int rank = 0;
  int ranks = 1;
  // How long rank 0 waits for a follower to copy a record before it faults
  // naming that follower. Followers wait for rank 0 without a deadline (it
  // may sit idle with no work), until a fault or their own abort.
  unsigned long long patience_ns = 0;
  [[nodiscard]] BATON_HOST_DEVICE bool on() const { return ranks > 1; }
};

struct SchedulerParams {
  WorkQueueView queue;
  MailboxView mailbox;
  StepArgs args;
  BatchBook book;
  TokenPolicy policy;  // the program's (StepProgram::tokens)
  PagePolicy pages;    // the program's (StepProgram::pages)
  DeviceBucketTable buckets;
  SchedulerControl* control = nullptr;    // device memory
  SchedulerCounters* counters = nullptr;  // device memory
  EngineStatus* status = nullptr;         // mapped host memory (device pointer)
  SchedulerObservers observers;
  SchedulerLockstep lockstep;
};

}  // namespace baton::detail
