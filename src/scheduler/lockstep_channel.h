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
//   s % 2 (LockstepHalves); the leader writes it (leader_claim, then its
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

#include <cstddef>
#include <cstdint>
#include <cuda/atomic>

#include "baton/config.h"

namespace baton::detail {

inline constexpr int kLockstepMaxFollowers = 7;  // tensor-parallel sizes up to 8

enum class LockstepWait : std::uint32_t { kReady = 0, kTimedOut = 1, kFaulted = 2 };

// The channel's counters, in the leader's memory, zero-initialized before
// any rank uses them (record 0 counts as published and copied by everyone).
struct LockstepChannel {
  std::uint64_t published;                      // the newest complete record
  std::uint64_t copied[kLockstepMaxFollowers];  // follower r's newest copied record
  std::uint32_t fault;                          // 0, or 1 + the first faulting rank
  std::uint32_t unused;
};

// The two halves records take turns in (leader's memory too), each
// `words` 32-bit words (lockstep_record.h sizes them for a program).
struct LockstepHalves {
  std::uint32_t* words = nullptr;  // [2][words]
  std::size_t words_per_half = 0;
  [[nodiscard]] BATON_HOST_DEVICE std::uint32_t* of(std::uint64_t s) const {
    return words + (s % 2) * words_per_half;
  }
};

namespace lockstep_internal {
template <class T>
BATON_HOST_DEVICE inline cuda::atomic_ref<T, cuda::thread_scope_system> at(T& x) {
  return cuda::atomic_ref<T, cuda::thread_scope_system>(x);
}
}  // namespace lockstep_internal

// The rank that raised the channel's fault, or -1.
BATON_HOST_DEVICE inline int lockstep_faulted_rank(LockstepChannel& c) {
  const std::uint32_t f = lockstep_internal::at(c.fault).load(cuda::std::memory_order_acquire);
  return f == 0 ? -1 : static_cast<int>(f) - 1;
}

// Raises the channel's fault for `rank`; the first raise wins. Returns the
// rank the fault names afterwards.
BATON_HOST_DEVICE inline int lockstep_raise_fault(LockstepChannel& c, int rank) {
  std::uint32_t expected = 0;
  lockstep_internal::at(c.fault).compare_exchange_strong(
      expected, static_cast<std::uint32_t>(rank) + 1u, cuda::std::memory_order_acq_rel);
  return lockstep_faulted_rank(c);
}

// Leader: waits until record s's half (LockstepHalves::of) is free, every
// one of the `followers` having copied record s - 2, and returns kReady: the
// half may be filled, then published. `lagging` gets the first follower not
// done when the wait ends otherwise.
template <class Patience>
BATON_HOST_DEVICE LockstepWait leader_claim(LockstepChannel& c, int followers, std::uint64_t s,
                                            Patience&& patience, int& lagging) {
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
  return LockstepWait::kReady;
}

// Leader: record s is complete (its words written by this thread, or by
// threads whose writes this thread has observed: a block barrier before).
BATON_HOST_DEVICE inline void leader_publish(LockstepChannel& c, std::uint64_t s) {
  lockstep_internal::at(c.published).store(s, cuda::std::memory_order_release);
}

// Follower: waits until record s is published and returns kReady: its half
// (LockstepHalves::of) may be copied, then released.
template <class Patience>
BATON_HOST_DEVICE LockstepWait follower_acquire(LockstepChannel& c, std::uint64_t s,
                                                Patience&& patience) {
  while (lockstep_internal::at(c.published).load(cuda::std::memory_order_acquire) < s) {
    if (lockstep_faulted_rank(c) >= 0) return LockstepWait::kFaulted;
    if (!patience()) return LockstepWait::kTimedOut;
  }
  return LockstepWait::kReady;
}

// Follower `follower` (0-based among the followers): record s is copied (by
// this thread, or by threads it has observed), its half free for record s + 2.
BATON_HOST_DEVICE inline void follower_release(LockstepChannel& c, int follower, std::uint64_t s) {
  lockstep_internal::at(c.copied[follower]).store(s, cuda::std::memory_order_release);
}

}  // namespace baton::detail
