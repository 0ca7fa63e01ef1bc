// The device state of one runtime's loop: the work queue, the completion
// mailbox, the step arguments and the scheduler's book, control block,
// counters and status, the trace ring, and the two streams (engines are
// launched on one, the host's control copies use the other). Internal to the
// runtime: allocation and the host's reads and writes of that state, nothing
// about the lifecycle.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/batch_policy.h"
#include "baton/cuda_resources.h"
#include "baton/page_policy.h"
#include "baton/runtime.h"
#include "baton/work_queue.h"
#include "completion/completion_mailbox.h"
#include "scheduler/scheduler_params.h"
#include "trace/trace_ring.h"

namespace baton::detail {

// The queue behind a runtime: the scheduler pops a warp (32 items) at a time.
[[nodiscard]] WorkQueueOptions QueueOptionsFor(const RuntimeOptions& options);

class LoopState {
 public:
  // The queue, mailbox, streams, control, counters, status and trace: what
  // the runtime needs before a program is registered (Submit seeds the queue).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<LoopState>> Create(
      const RuntimeOptions& options);

  // The batch's arrays, sized once the program says how many items it runs
  // at a time and how it fills a step (RegisterStepProgram). Once.
  // `pages`: the program's paging (its page pool lives here; the program
  // owns the page table).
  [[nodiscard]] absl::Status AttachBatch(std::uint32_t max_batch, const TokenPolicy& policy,
                                         const PagePolicy& pages);
  [[nodiscard]] bool has_batch() const { return max_batch_ != 0; }
  [[nodiscard]] std::uint32_t max_batch() const { return max_batch_; }

  // What step kernels read (baked into the captured graphs).
  [[nodiscard]] StepArgs args() const;
  // The decision's parameters, without a bucket table (engines add theirs).
  [[nodiscard]] SchedulerParams scheduler_params() const;

  WorkQueue& queue() { return queue_; }
  CompletionMailbox& mailbox() { return mailbox_; }
  [[nodiscard]] const DeviceTraceRing& trace() const { return trace_; }
  [[nodiscard]] cudaStream_t launch_stream() const { return launch_stream_.get(); }
  [[nodiscard]] cudaStream_t control_stream() const { return control_stream_.get(); }
  // What the device published at its last exit (mapped host memory).
  [[nodiscard]] const EngineStatus& status() const { return *status_.host(); }
  // The exit epoch, read with acquire ordering (fields above are valid for it).
  [[nodiscard]] std::uint64_t exits() const;

  // Every slot free, nothing active (at creation and after Abort).
  [[nodiscard]] absl::Status ResetBatch();
  // Host -> device control through the copy engine, so it lands while the
  // loop runs without needing an SM or a bus read per step on the device.
  [[nodiscard]] absl::Status WriteControl(const SchedulerControl& control);
  // Lockstep: the next engine run has not ended (SchedulerCounters::lockstep_ended),
  // cleared on the launch stream before that run is launched.
  [[nodiscard]] absl::Status ClearLockstepEnd();
  // Snapshots through the copy engine: no SM is needed, the loop keeps running.
  [[nodiscard]] absl::StatusOr<SchedulerCounters> ReadCounters() const;
  [[nodiscard]] absl::StatusOr<std::uint64_t> ReadSteps() const;
  // The batch's counts (zeros before AttachBatch).
  [[nodiscard]] absl::StatusOr<BatchCounts> ReadBatchCounts() const;
  // The active items, then those held for pages (call only once the loop
  // has ended).
  [[nodiscard]] absl::StatusOr<std::vector<WorkItem>> ReadActiveItems() const;

 private:
  LoopState() = default;
  absl::Status Init(const RuntimeOptions& options);

  // Tensor parallelism (RuntimeOptions::lockstep): the group, this rank, and
  // a follower's copy of one record.
  std::shared_ptr<const LockstepGroup> lockstep_;
  int lockstep_rank_ = 0;
  DeviceBuffer<std::uint32_t> lockstep_copy_;

  std::uint32_t max_batch_ = 0;
  TokenPolicy policy_;
  PagePolicy pages_;
  WorkQueue queue_;
  CompletionMailbox mailbox_;
  Stream launch_stream_;
  Stream control_stream_;
  DeviceBuffer<StepHeader> header_;
  DeviceBuffer<WorkItem> items_;
  // slots, item_steps, item_tokens, tokens, token_offsets, finished, results
  DeviceBuffer<std::uint32_t> words_;
  DeviceBuffer<BatchCounts> counts_;
  DeviceBuffer<std::uint32_t> free_slots_;
  DeviceBuffer<Completion> retired_;
  DeviceBuffer<std::uint32_t> free_pages_;  // paged programs only
  DeviceBuffer<WorkItem> held_;
  DeviceBuffer<SchedulerControl> control_;
  DeviceBuffer<SchedulerCounters> counters_;
  MappedHostBuffer<EngineStatus> status_;
  MappedHostBuffer<SchedulerControl> control_staging_;
  DeviceTraceRing trace_;
};

}  // namespace baton::detail
