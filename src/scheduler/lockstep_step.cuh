// The schedulers of tensor-parallel ranks in lockstep (SchedulerLockstep in
// scheduler/scheduler_params.h; the plan in docs/DESIGN.md, "Collectives
// between the GPUs of a host"): rank 0's decision runs as on one GPU and is
// then published as a record (scheduler/lockstep_record.h) over the channel
// (scheduler/lockstep_channel.h) in rank 0's memory; every other rank's
// decision is the next record, copied over peer loads. All ranks then run
// the same step (rows, bucket, pages) and their collectives meet.
//
// What rank 0 publishes for each of its decisions:
// - a step: kStep with the header, the positions and the pages it mapped;
// - an end the host will not resume on its own (drained, aborted, a device
//   error): kStop, the exit in the command word's upper half; followers end
//   the same way;
// - idle (nothing to run) or a full mailbox: nothing. Rank 0 parks and the
//   host relaunches it; followers keep waiting for the next record, so only
//   rank 0's host loop manages parks.
// A follower waits without a deadline (rank 0 may idle for long), ending on
// the channel's fault or its own abort; rank 0 waits for followers to copy
// (the channel's two halves) for patience_ns, then faults naming the one it
// waited for. A fault ends every rank's loop with a kLockstep device error
// naming the rank. Warp-wide (the scheduler's warp); lane 0 moves the record.
// Internal; Abseil-free.
#pragma once

#include <cuda/atomic>
#include <cuda/ptx>

#include "baton/device_error_word.h"
#include "baton/engine.h"
#include "scheduler/batch_ops.cuh"
#include "scheduler/lockstep_channel.h"
#include "scheduler/lockstep_record.h"
#include "scheduler/scheduler_params.h"

namespace baton::detail {

// kStop records carry the exit in the command word's upper half.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t lockstep_stop_word(EngineExit why) {
  return static_cast<std::uint32_t>(LockstepCommand::kStop) |
         (static_cast<std::uint32_t>(why) << 16);
}

// Rank 0's wait for its followers: up to patience_ns, pausing between polls.
struct LeaderPatience {
  unsigned long long end;
  __device__ explicit LeaderPatience(unsigned long long ns)
      : end(cuda::ptx::get_sreg_globaltimer() + ns) {}
  __device__ bool operator()() const {
    __nanosleep(128);
    return cuda::ptx::get_sreg_globaltimer() < end;
  }
};

// A follower's wait for rank 0: until its own host aborts.
struct FollowerPatience {
  const volatile SchedulerControl* control;
  __device__ bool operator()() const {
    __nanosleep(256);
    return control->abort == 0;
  }
};

// Ends this rank's loop on the channel's fault (lane 0): the device error
// names the faulted rank.
__device__ inline EngineExit lockstep_failed(const SchedulerParams& p, int rank) {
  record_device_error(&p.counters->error_word, DeviceErrorSite::kLockstep,
                      static_cast<std::uint32_t>(rank < 0 ? 0 : rank));
  return EngineExit::kError;
}

// Rank 0, after deciding `exit` (kRunning: the step in p.args, its pages
// mapped): publishes the record. Returns `exit`, or kError when a follower
// did not copy record s - 2 within patience_ns (the fault then names it) or
// another rank faulted. Every lane gets the same value.
__device__ inline EngineExit lead_step(const SchedulerParams& p, EngineExit exit) {
  const SchedulerLockstep& l = p.lockstep;
  const bool step = exit == EngineExit::kRunning;
  const bool stop =
      exit == EngineExit::kDrained || exit == EngineExit::kAborted || exit == EngineExit::kError;
  if (!step && !stop) return exit;  // idle or parked: the host resumes rank 0 alone
  __syncwarp();                     // the step's arrays, written by every lane
  std::uint32_t result = static_cast<std::uint32_t>(exit);
  const std::uint32_t ended = p.counters->lockstep_ended;
  if (ended != 0) return static_cast<EngineExit>(ended - 1);  // published (or failed) already
  if (lane_id() == 0) {
    LockstepChannel& c = *l.channel;
    const std::uint64_t s = p.counters->records + 1;
    int lagging = -1;
    const LockstepWait wait =
        leader_claim(c, l.ranks - 1, s, LeaderPatience(l.patience_ns), lagging);
    if (wait == LockstepWait::kReady) {
      std::uint32_t* const words = l.halves.of(s);
      const std::size_t n =
          pack_lockstep_record(step ? LockstepCommand::kStep : LockstepCommand::kStop, p.args,
                               p.pages, words, l.halves.words_per_half);
      if (step && n == 0) {
        // Sized by the runtime for the program: a broken invariant.
        result = static_cast<std::uint32_t>(lockstep_failed(p, lockstep_raise_fault(c, 0)));
      } else {
        if (!step) words[0] = lockstep_stop_word(exit);
        leader_publish(c, s);
        p.counters->records = s;
      }
    } else {
      const int faulted = wait == LockstepWait::kTimedOut ? lockstep_raise_fault(c, lagging + 1)
                                                          : lockstep_faulted_rank(c);
      result = static_cast<std::uint32_t>(lockstep_failed(p, faulted));
    }
    if (result != static_cast<std::uint32_t>(EngineExit::kRunning)) {
      p.counters->lockstep_ended = result + 1;
    }
  }
  return static_cast<EngineExit>(__shfl_sync(0xFFFFFFFFu, result, 0));
}

// A follower: the next record rank 0 publishes, copied into this rank's
// StepArgs and page table. Returns kRunning with *bucket set (the step to
// launch), the exit a kStop record carries, kAborted on this rank's own abort
// (the fault then names it) or kError on a fault. Every lane gets the same.
__device__ inline EngineExit follow_step(const SchedulerParams& p, std::uint32_t* bucket) {
  const SchedulerLockstep& l = p.lockstep;
  LockstepChannel& c = *l.channel;
  const unsigned lane = lane_id();
  const std::uint64_t s = p.counters->records + 1;
  const std::uint32_t ended = p.counters->lockstep_ended;
  if (ended != 0) return static_cast<EngineExit>(ended - 1);  // rank 0 ended this run already
  std::uint32_t result = static_cast<std::uint32_t>(EngineExit::kRunning);
  std::uint32_t length = 0;
  if (lane == 0) {
    if (p.counters->error_word != 0) {
      lockstep_raise_fault(c, l.rank);  // this rank's own error: stop the others
      result = static_cast<std::uint32_t>(EngineExit::kError);
    } else {
      // This rank's own abort ends it at this step boundary, even while rank
      // 0 keeps publishing (the wait sees it only when no record is ready),
      // or while it waits: the others stop on the fault; this run's later
      // decisions repeat the abort.
      const LockstepWait wait = p.control->abort != 0
                                    ? LockstepWait::kTimedOut
                                    : follower_acquire(c, s, FollowerPatience{p.control});
      if (wait == LockstepWait::kFaulted) {
        result = static_cast<std::uint32_t>(lockstep_failed(p, lockstep_faulted_rank(c)));
      } else if (wait == LockstepWait::kTimedOut) {
        lockstep_raise_fault(c, l.rank);
        result = static_cast<std::uint32_t>(EngineExit::kAborted);
        p.counters->lockstep_ended = result + 1;
      } else {
        length = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(l.halves.of(s)[1])
                     .load(cuda::std::memory_order_relaxed);
        if (length > l.halves.words_per_half) length = 0;  // unpack refuses it
      }
    }
  }
  result = __shfl_sync(0xFFFFFFFFu, result, 0);
  if (result != static_cast<std::uint32_t>(EngineExit::kRunning)) {
    return static_cast<EngineExit>(result);
  }
  // The record's words (system-scope loads: rank 0's memory over NVLink),
  // then its half back to rank 0.
  length = __shfl_sync(0xFFFFFFFFu, length, 0);
  const std::uint32_t* const half = l.halves.of(s);
  for (std::uint32_t i = lane; i < length; i += 32) {
    l.copy[i] = cuda::atomic_ref<const std::uint32_t, cuda::thread_scope_system>(half[i]).load(
        cuda::std::memory_order_relaxed);
  }
  __syncwarp();
  std::uint32_t picked = kNoBucket;
  if (lane == 0) {
    follower_release(c, l.rank - 1, s);
    p.counters->records = s;
    const std::uint32_t word = length >= 1 ? l.copy[0] : 0;
    if ((word & 0xFFFFu) == static_cast<std::uint32_t>(LockstepCommand::kStop)) {
      result = word >> 16;
      // Rank 0's device error: this rank's loop reports it, naming rank 0.
      if (result == static_cast<std::uint32_t>(EngineExit::kError)) lockstep_failed(p, 0);
      p.counters->lockstep_ended = result + 1;
      p.book.counts->batch = 0;         // rank 0 ended; nothing of this rank's is pending
    } else if (StepArgs args = p.args;  // (a copy of the pointers: unpack writes through them)
               unpack_lockstep_record(l.copy, length, args, p.pages) !=
                   static_cast<std::uint32_t>(LockstepCommand::kStep) ||
               p.args.header->bucket >= p.buckets.count) {
      result = static_cast<std::uint32_t>(lockstep_failed(p, lockstep_raise_fault(c, l.rank)));
    } else {
      // What this rank's step and a carried decision read (engines/carried_decision.cuh).
      p.book.counts->batch = p.args.header->batch;
      p.book.counts->rows = p.args.header->tokens;
      p.counters->steps += 1;
      picked = p.args.header->bucket;
    }
  }
  result = __shfl_sync(0xFFFFFFFFu, result, 0);
  *bucket = __shfl_sync(0xFFFFFFFFu, picked, 0);
  return static_cast<EngineExit>(result);
}

}  // namespace baton::detail
