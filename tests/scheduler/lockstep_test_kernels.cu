// The lockstep channel's ranks on the device (lockstep_test_kernels.h): the
// leader packs each synthetic step with pack_lockstep_record and publishes
// it; each follower acquires it, copies its words from the leader's memory a
// warp at a time (system-scope relaxed loads: over peer access they must not
// come from a stale cache line), releases the half, and unpacks its copy
// into its own StepArgs with unpack_lockstep_record, poisoned first, then
// compares every field with the step the record should carry.
#include <cuda/atomic>
#include <cuda/ptx>

#include "scheduler/lockstep_record.h"
#include "scheduler/lockstep_step.cuh"
#include "scheduler/lockstep_test_kernels.h"

namespace baton::test {
namespace {

using detail::LockstepChannel;
using detail::LockstepCommand;
using detail::LockstepWait;

constexpr unsigned kFullWarp = 0xFFFFFFFFu;
constexpr std::uint32_t kPoison = 0xDEADBEEFu;

// A wait's patience: the scheduler's own (pauses between polls, gives up at
// the deadline).
using Patience = detail::LeaderPatience;

__device__ std::uint32_t mix(std::uint64_t s, int rank) {
  std::uint64_t h =
      s * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<std::uint32_t>(h);
}

__device__ void end(LockstepOutcome& o, LockstepChannel& c, LockstepEnd why) {
  o.ended = why;
  o.faulted_rank = detail::lockstep_faulted_rank(c);
}

// Leader lane 0 writes step s into its StepArgs (for pack to read back).
__device__ void write_step(std::uint64_t s, const StepArgs& a) {
  const SyntheticStep step = SyntheticStep::of(s, a.max_batch);
  *a.header = step.header;
  for (std::uint32_t p = 0; p < step.header.batch; ++p) {
    a.items[p] = SyntheticStep::item(s, p);
    a.slots[p] = SyntheticStep::slot(s, p, a.max_batch);
    a.item_steps[p] = SyntheticStep::steps(s, p);
    a.item_tokens[p] = SyntheticStep::tokens_before(s, p);
    a.tokens[p] = 1;
    a.token_offsets[p] = p;
  }
}

// Whether the follower's unpacked StepArgs hold step s (lane 0).
__device__ bool holds_step(std::uint64_t s, const StepArgs& a) {
  const SyntheticStep step = SyntheticStep::of(s, a.max_batch);
  const StepHeader& h = *a.header;
  if (h.step != step.header.step || h.batch != step.header.batch ||
      h.bucket != step.header.bucket || h.bucket_size != step.header.bucket_size ||
      h.tokens != step.header.tokens) {
    return false;
  }
  for (std::uint32_t p = 0; p < h.batch; ++p) {
    const WorkItem want = SyntheticStep::item(s, p);
    const WorkItem& got = a.items[p];
    if (got.kind != want.kind || got.id != want.id || got.payload != want.payload ||
        a.slots[p] != SyntheticStep::slot(s, p, a.max_batch) ||
        a.item_steps[p] != SyntheticStep::steps(s, p) ||
        a.item_tokens[p] != SyntheticStep::tokens_before(s, p) || a.tokens[p] != 1 ||
        a.token_offsets[p] != p) {
      return false;
    }
  }
  return true;
}

__device__ void run_leader(const LockstepLaunch& l, const LockstepRank& me,
                           const LockstepScenario& sc) {
  LockstepChannel& c = *l.channel;
  LockstepOutcome& o = *me.outcome;
  const bool lane0 = threadIdx.x == 0;
  for (std::uint64_t s = 1; s <= sc.records; ++s) {
    if (sc.fault_rank == 0 && s == sc.fault_at) {
      if (lane0) {
        detail::lockstep_raise_fault(c, 0);
        end(o, c, LockstepEnd::kRaised);
      }
      return;
    }
    int lagging = -1;
    LockstepWait wait = LockstepWait::kReady;
    if (lane0) wait = detail::leader_claim(c, l.ranks - 1, s, Patience(sc.patience_ns), lagging);
    wait = static_cast<LockstepWait>(__shfl_sync(kFullWarp, static_cast<unsigned>(wait), 0));
    if (wait != LockstepWait::kReady) {
      if (lane0) {
        if (wait == LockstepWait::kTimedOut) detail::lockstep_raise_fault(c, lagging + 1);
        o.lagging = lagging;
        end(o, c, wait == LockstepWait::kTimedOut ? LockstepEnd::kTimedOut : LockstepEnd::kFaulted);
      }
      return;
    }
    bool packed = true;
    if (lane0) {
      write_step(s, me.args);
      packed = detail::pack_lockstep_record(LockstepCommand::kStep, me.args, PagePolicy{},
                                            l.halves.of(s), l.halves.words_per_half) != 0;
      if (packed) {
        detail::leader_publish(c, s);
        o.records = s;
      } else {
        detail::lockstep_raise_fault(c, 0);
        end(o, c, LockstepEnd::kBadRecord);
      }
    }
    if (__shfl_sync(kFullWarp, packed ? 1 : 0, 0) == 0) return;
  }
  if (lane0) end(o, c, LockstepEnd::kFinished);
}

__device__ void run_follower(const LockstepLaunch& l, const LockstepRank& me,
                             const LockstepScenario& sc) {
  LockstepChannel& c = *l.channel;
  LockstepOutcome& o = *me.outcome;
  const unsigned lane = threadIdx.x;
  const bool lane0 = lane == 0;
  const int follower = me.rank - 1;
  StepArgs args = me.args;  // (unpack takes it by reference: the pointers are the same)
  const StepArgs& a = args;
  for (std::uint64_t s = 1; s <= sc.records; ++s) {
    if (me.rank == sc.stall_rank && s == sc.stall_at) {
      if (lane0) end(o, c, LockstepEnd::kStalled);
      return;
    }
    if (me.rank == sc.fault_rank && s == sc.fault_at) {
      if (lane0) {
        detail::lockstep_raise_fault(c, me.rank);
        end(o, c, LockstepEnd::kRaised);
      }
      return;
    }
    LockstepWait wait = LockstepWait::kReady;
    std::uint32_t length = 0;
    if (lane0) {
      wait = detail::follower_acquire(c, s, Patience(sc.patience_ns));
      if (wait == LockstepWait::kReady) {
        const std::uint64_t published =
            cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(c.published)
                .load(cuda::std::memory_order_acquire);
        if (published - s > o.ahead) o.ahead = published - s;
        length = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(l.halves.of(s)[1])
                     .load(cuda::std::memory_order_relaxed);
      } else if (wait == LockstepWait::kTimedOut) {
        detail::lockstep_raise_fault(c, me.rank);
      }
    }
    wait = static_cast<LockstepWait>(__shfl_sync(kFullWarp, static_cast<unsigned>(wait), 0));
    if (wait != LockstepWait::kReady) {
      if (lane0) {
        end(o, c, wait == LockstepWait::kTimedOut ? LockstepEnd::kTimedOut : LockstepEnd::kFaulted);
      }
      return;
    }
    length = __shfl_sync(kFullWarp, length, 0);
    if (length > l.halves.words_per_half)
      length = static_cast<std::uint32_t>(l.halves.words_per_half);
    // The record's words, then the half back to the leader.
    std::uint32_t* const half = l.halves.of(s);
    for (std::uint32_t i = lane; i < length; i += 32) {
      me.copy[i] = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(half[i]).load(
          cuda::std::memory_order_relaxed);
    }
    __syncwarp();
    if (lane0) detail::follower_release(c, follower, s);
    // Poison what the record must overwrite, then unpack and check.
    for (std::uint32_t p = lane; p < a.max_batch; p += 32) {
      a.items[p] = WorkItem::make(kPoison, kPoison, kPoison);
      a.slots[p] = a.item_steps[p] = a.item_tokens[p] = a.tokens[p] = a.token_offsets[p] = kPoison;
    }
    __syncwarp();
    bool bad = false;
    if (lane0) {
      a.header->step = kPoison;
      const std::uint32_t command =
          detail::unpack_lockstep_record(me.copy, length, args, PagePolicy{});
      bad = command != static_cast<std::uint32_t>(LockstepCommand::kStep);
      if (bad) {
        detail::lockstep_raise_fault(c, me.rank);
        end(o, c, LockstepEnd::kBadRecord);
      } else {
        if (!holds_step(s, args)) o.mismatches += 1;
        o.records = s;
        // A follower whose host is slow now and then.
        if (sc.lag && mix(s, me.rank) % 64 == 0) __nanosleep(4000 + mix(s, me.rank) % 16000);
      }
    }
    if (__shfl_sync(kFullWarp, bad ? 1 : 0, 0) != 0) return;
  }
  if (lane0) end(o, c, LockstepEnd::kFinished);
}

__global__ void __launch_bounds__(32)
    lockstep_ranks(const LockstepLaunch launch, const LockstepScenario scenario) {
  const LockstepRank& me = launch.rank[blockIdx.x];
  if (me.rank == 0) {
    run_leader(launch, me, scenario);
  } else {
    run_follower(launch, me, scenario);
  }
}

}  // namespace

cudaError_t EnqueueLockstepRanks(const LockstepLaunch& launch, const LockstepScenario& scenario,
                                 cudaStream_t stream) {
  if (launch.count < 1 || launch.count > kLockstepMaxRanks || launch.ranks < 1 ||
      launch.ranks > kLockstepMaxRanks || launch.channel == nullptr ||
      launch.halves.words == nullptr) {
    return cudaErrorInvalidValue;
  }
  lockstep_ranks<<<launch.count, 32, 0, stream>>>(launch, scenario);
  return cudaGetLastError();
}

}  // namespace baton::test
