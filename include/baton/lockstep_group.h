// baton::LockstepGroup: the device schedulers of tensor-parallel ranks in
// lockstep (docs/DESIGN.md, "Collectives between the GPUs of a host"). Each
// rank has its own Runtime on its own GPU, made with
// RuntimeOptions::lockstep = the group and lockstep_rank = its rank. Rank 0's
// runtime takes the work (Submit, Poll) and its scheduler decides every step
// as on one GPU, then publishes the step (header, positions, the pages it
// mapped) into a channel in rank 0's memory; every other rank's scheduler
// copies each step over peer loads and launches the same bucket, so the
// ranks' collectives meet. The host drives rank 0 alone: followers take no
// work, park only when rank 0 ends the loop (Stop, Abort, a device error) and
// are never resumed by their own Poll.
//
//   LockstepGroupOptions group_options;
//   group_options.devices = {0, 1};
//   auto group = LockstepGroup::Create(group_options);
//   // on GPU r: RuntimeOptions o; o.lockstep = *group; o.lockstep_rank = r;
//   // register the rank's program on every runtime (the same buckets, batch
//   // and token policy on every rank: a record names a bucket by its index),
//   // Prepare(engine) every rank (required where ranks share a GPU: building
//   // graphs there waits for a running follower), Start every follower,
//   // then rank 0; Submit and Poll rank 0; Stop rank 0, then the followers.
//
// Faults: rank 0 waits up to `patience` for a follower to copy a step (two
// steps may be in flight), then ends every rank's loop naming it; a
// follower's own device error or Abort does the same; a fault comes back from
// each runtime's Poll/Stop as Aborted naming the rank.
//
// Thread safety: immutable after Create but for the ranks' running marks
// (atomics): the ranks' runtimes may be driven from different threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton {

struct LockstepGroupOptions {
  // Rank r's GPU. Ranks may share one (tests); every GPU must reach the
  // first one's memory (peer access, which Create enables).
  std::vector<int> devices;
  // The largest step any rank's program runs: its batch and rows, and (paged
  // programs) its smallest page, which bound a step's record.
  std::uint32_t max_batch = 64;
  std::uint32_t max_tokens = 2048;
  std::uint32_t min_page_tokens = 16;
  // How long rank 0 waits for a follower to copy a step before it faults.
  absl::Duration patience = absl::Seconds(2);
};

class LockstepGroup {
 public:
  // InvalidArgument for options out of range; FailedPrecondition where a
  // GPU cannot reach the first one's memory.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const LockstepGroup>> Create(
      const LockstepGroupOptions& options);
  ~LockstepGroup();
  LockstepGroup(const LockstepGroup&) = delete;
  LockstepGroup& operator=(const LockstepGroup&) = delete;

  [[nodiscard]] int ranks() const;
  [[nodiscard]] int device(int rank) const;
  [[nodiscard]] const LockstepGroupOptions& options() const;
  // Words one step's record may take (the channel's two halves hold one each).
  [[nodiscard]] std::size_t record_words() const;

  class Impl;
  [[nodiscard]] const Impl& impl() const { return *impl_; }

 private:
  explicit LockstepGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
