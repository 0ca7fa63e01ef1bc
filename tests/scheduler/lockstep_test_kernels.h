// Kernels for lockstep_channel_gpu_test behind a plain C++ interface: the
// ranks of the tensor-parallel lockstep channel (src/scheduler/lockstep_channel.h)
// on the device, carrying lockstep records (src/scheduler/lockstep_record.h)
// of synthetic steps. Each rank is one warp (a block of 32 threads): the
// ranks run as blocks of one kernel on one GPU, or as one kernel per GPU with
// the channel in rank 0's memory, which the others read and write over peer
// access, as the schedulers in lockstep will.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/step_args.h"
#include "scheduler/lockstep_channel.h"

namespace baton::test {

inline constexpr int kLockstepMaxRanks = 1 + detail::kLockstepMaxFollowers;

// What a run does, and what goes wrong on purpose in it.
struct LockstepScenario {
  std::uint64_t records = 0;           // records the leader publishes
  unsigned long long patience_ns = 0;  // how long any one wait may take
  std::uint64_t fault_at = 0;          // rank fault_rank raises the fault instead of record
  int fault_rank = -1;                 //   fault_at (0: never)
  std::uint64_t stall_at = 0;          // follower rank stall_rank leaves before copying
  int stall_rank = -1;                 //   record stall_at, releasing nothing (0: never)
  bool lag = false;                    // followers pause now and then, at random records
};

// How a rank's run ended.
enum class LockstepEnd : std::uint32_t {
  kFinished = 0,   // every record
  kTimedOut = 1,   // a wait ran out of patience (this rank raised the fault)
  kFaulted = 2,    // a wait saw the fault another rank raised
  kRaised = 3,     // the scenario's fault, raised by this rank
  kStalled = 4,    // the scenario's stall
  kBadRecord = 5,  // a record that did not pack or unpack (this rank raised the fault)
  kNotRun = 0xFFFFFFFFu,
};

// What a rank reports, in its own device memory.
struct LockstepOutcome {
  unsigned long long records = 0;     // leader: published; follower: copied and checked
  unsigned long long mismatches = 0;  // follower: records whose unpacked step was not the leader's
  unsigned long long ahead = 0;       // follower: most records the leader had published past
                                      //   the one it had just acquired
  LockstepEnd ended = LockstepEnd::kNotRun;
  int faulted_rank = -1;  // the channel's fault when this rank ended
  int lagging = -1;       // leader: the follower (0-based) it timed out on
};

// One rank: the channel (rank 0's memory) and its own memory.
struct LockstepRank {
  int rank = 0;
  StepArgs args;                  // leader: packed from; follower: unpacked into
  std::uint32_t* copy = nullptr;  // follower: a record's local copy (words_per_half words)
  LockstepOutcome* outcome = nullptr;
};
struct LockstepLaunch {
  detail::LockstepChannel* channel = nullptr;
  detail::LockstepHalves halves;
  int ranks = 0;                         // the leader and ranks - 1 followers
  LockstepRank rank[kLockstepMaxRanks];  // the launch's blocks, in order
  int count = 0;                         // blocks
};

// Runs launch.rank[0 .. count) as the blocks of one kernel on the current
// device (each rank's memory on that device or reachable from it).
[[nodiscard]] cudaError_t EnqueueLockstepRanks(const LockstepLaunch& launch,
                                               const LockstepScenario& scenario,
                                               cudaStream_t stream);

// Record s's step, which the leader writes into its StepArgs and packs and
// every follower must unpack: a batch of 1 + 7s % max_batch positions whose
// fields all depend on s and the position (not paged).
struct SyntheticStep {
  StepHeader header;
  [[nodiscard]] BATON_HOST_DEVICE static SyntheticStep of(std::uint64_t s,
                                                          std::uint32_t max_batch) {
    SyntheticStep step;
    step.header.step = s;
    step.header.batch = 1 + static_cast<std::uint32_t>((s * 7) % max_batch);
    step.header.bucket = static_cast<std::uint32_t>(s % 3);
    step.header.bucket_size = max_batch;
    step.header.tokens = step.header.batch;
    return step;
  }
  [[nodiscard]] BATON_HOST_DEVICE static WorkItem item(std::uint64_t s, std::uint32_t p) {
    return WorkItem::make(p, static_cast<std::uint32_t>(s * 31 + p), (s << 20) | p);
  }
  [[nodiscard]] BATON_HOST_DEVICE static std::uint32_t slot(std::uint64_t s, std::uint32_t p,
                                                            std::uint32_t max_batch) {
    return static_cast<std::uint32_t>((s + p) % max_batch);
  }
  [[nodiscard]] BATON_HOST_DEVICE static std::uint32_t steps(std::uint64_t s, std::uint32_t p) {
    return static_cast<std::uint32_t>(s) + p;
  }
  [[nodiscard]] BATON_HOST_DEVICE static std::uint32_t tokens_before(std::uint64_t s,
                                                                     std::uint32_t p) {
    return static_cast<std::uint32_t>(2 * s) + p;
  }
};

}  // namespace baton::test
