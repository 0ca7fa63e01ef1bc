// How tensor-parallel ranks' schedulers stay in lockstep (issue #42; the plan
// in docs/DESIGN.md, "Collectives between the GPUs of a host"): rank 0, the
// leader, decides every step and publishes a record (the step's arguments
// and what the followers must do: run it, park, stop); every follower copies
// the record of each step in order and does the same. Written once as plain
// functions over memory any rank can reach (rank 0's device memory, which
// followers read and write over peer access; host memory in the CPU tests),
// host and device alike, as the batch policy is (baton/batch_policy.h).
//
// The protocol:
// - Records are numbered 1, 2, ... (a step number). Record s lives in half
//   s % 2 of the channel; the leader writes it (leader_claim, then its
//   words, then leader_publish: a release store of `published`) only after
//   every follower has copied record s - 2, which used the same half
//   (`copied[r]`, stored with release by follower r after its copy). So a
//   follower never reads a half the leader is rewriting: no torn records,
//   and the leader runs at most two records ahead of its slowest follower.
// - A follower waits (acquire) until `published` reaches s, copies half
//   s % 2, and reports it (follower_release). Records are never skipped.
// - Any rank may raise the channel's fault (the first one's rank is kept);
//   every wait then returns kFaulted naming it, so one rank's fault stops
//   every rank instead of leaving them waiting for each other.
// - Every wait takes the caller's patience: a functor called between polls
//   that returns false when the wait should end (a deadline; it also pauses:
//   __nanosleep on the device, a yield on the host). A wait that runs out
//   returns kTimedOut; the caller raises the fault and reports it.
//
// Costs: a follower's wait is one acquire load a poll of rank 0's memory
// (over NVLink for a follower); the leader's claim reads one counter per
// follower. Records are fixed-size words so that a warp can copy them.
// Internal; Abseil-free; host and device.
#pragma once

#include <cuda/atomic>
#include <cstdint>

#include "baton/config.h"

namespace baton::detail {

inline constexpr int kLockstepMaxFollowers = 7;  // tensor-parallel sizes up to 8

enum class LockstepWait : std::uint32_t { kReady = 0, kTimedOut = 1, kFaulted = 2 };

// The channel, in the leader's memory. Zero-initialized before any rank
// uses it (record 0 counts as published and copied by everyone).
template <int Words>
struct LockstepChannel {
  std::uint64_t published;                     // the newest complete record
  std::uint64_t copied[kLockstepMaxFollowers];  // follower r's newest copied record
  std::uint32_t fault;                         // 0, or 1 + the first faulting rank
  std::uint32_t words[2][Words];               // the two halves
};

namespace lockstep_internal {
template <class T>
BATON_HOST_DEVICE inline cuda::atomic_ref<T, cuda::thread_scope_system> at(T& x) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(x);
}
}  // namespace lockstep_internal

// The rank that raised the channel's fault, or -1.
template <int Words>
BATON_HOST_DEVICE inline int lockstep_faulted_rank(LockstepChannel<Words>& c) {
  const std::uint32_t f = lockstep_internal::at(c.fault).load(cuda::std::memory_order_acquire);
  return f == 0 ? -1 : static_cast<int>(f) - 1;
}

// Raises the channel's fault for `rank`; the first raise wins. Returns the
// rank the fault names afterwards.
template <int Words>
BATON_HOST_DEVICE inline int lockstep_raise_fault(LockstepChannel<Words>& c, int rank) {
  std::uint32_t expected = 0;
  lockstep_internal::at(c.fault).compare_exchange_strong(
      expected, static_cast<std::uint32_t>(rank) + 1u, cuda::std::memory_order_acq_rel);
  return lockstep_faulted_rank(c);
}

// Leader: waits until half s % 2 is free for record s (every one of the
// `followers` has copied record s - 2), then returns kReady and the half in
// `half`, to be filled and published. `lagging` gets the first follower not
// done when the wait ends otherwise.
template <int Words, class Patience>
BATON_HOST_DEVICE LockstepWait leader_claim(LockstepChannel<Words>& c, int followers,
                                            std::uint64_t s, Patience&& patience,
                                            std::uint32_t*& half, int& lagging) {
  const std::uint64_t needed = s >= 2 ? s - 2 : 0;
  for (int r = 0; r < followers; ++r) {
    while (lockstep_internal::at(c.copied[r]).load(cuda::std::memory_order_acquire) < needed) {
      if (lockstep_faulted_rank(c) >= 0) return LockstepWait::kFaulted;
      if (!patience()) {
        lagging = r;
        return LockstepWait::kTimedOut;
      }
    }
  }
  half = c.words[s % 2];
  return LockstepWait::kReady;
}

// Leader: record s is complete (its words written by this thread, or by
// threads whose writes this thread has observed: a block barrier before).
template <int Words>
BATON_HOST_DEVICE inline void leader_publish(LockstepChannel<Words>& c, std::uint64_t s) {
  lockstep_internal::at(c.published).store(s, cuda::std::memory_order_release);
}

// Follower: waits until record s is published, then returns kReady and its
// half in `half`, to be copied and released.
template <int Words, class Patience>
BATON_HOST_DEVICE LockstepWait follower_acquire(LockstepChannel<Words>& c, std::uint64_t s,
                                                Patience&& patience, const std::uint32_t*& half) {
  while (lockstep_internal::at(c.published).load(cuda::std::memory_order_acquire) < s) {
    if (lockstep_faulted_rank(c) >= 0) return LockstepWait::kFaulted;
    if (!patience()) return LockstepWait::kTimedOut;
  }
  half = c.words[s % 2];
  return LockstepWait::kReady;
}

// Follower `follower` (0-based among the followers): record s is copied (by
// this thread, or by threads it has observed), its half free for record s + 2.
template <int Words>
BATON_HOST_DEVICE inline void follower_release(LockstepChannel<Words>& c, int follower,
                                               std::uint64_t s) {
  lockstep_internal::at(c.copied[follower]).store(s, cuda::std::memory_order_release);
}

}  // namespace baton::detail
