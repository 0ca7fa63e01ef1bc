#include "loop_state.h"

#include <cuda/atomic>

#include "baton/status.h"
#include "lockstep_group_impl.h"

namespace baton::detail {

WorkQueueOptions QueueOptionsFor(const RuntimeOptions& options) {
  WorkQueueOptions queue;
  queue.capacity = options.queue_capacity;
  queue.max_batch = 32;
  return queue;
}

absl::StatusOr<std::unique_ptr<LoopState>> LoopState::Create(const RuntimeOptions& options) {
  std::unique_ptr<LoopState> state(new LoopState());
  BATON_RETURN_IF_ERROR(state->Init(options));
  return state;
}

absl::Status LoopState::Init(const RuntimeOptions& options) {
  BATON_ASSIGN_OR_RETURN(queue_, WorkQueue::Create(QueueOptionsFor(options)));
  BATON_ASSIGN_OR_RETURN(mailbox_, CompletionMailbox::Create(options.mailbox_capacity));
  BATON_ASSIGN_OR_RETURN(launch_stream_, CreateStream());
  BATON_ASSIGN_OR_RETURN(control_stream_, CreateStream());
  BATON_ASSIGN_OR_RETURN(control_, DeviceBuffer<SchedulerControl>::Create(1));
  BATON_ASSIGN_OR_RETURN(counters_, DeviceBuffer<SchedulerCounters>::Create(1));
  BATON_ASSIGN_OR_RETURN(status_, MappedHostBuffer<EngineStatus>::Create(1));
  BATON_ASSIGN_OR_RETURN(control_staging_, MappedHostBuffer<SchedulerControl>::Create(1));
  BATON_ASSIGN_OR_RETURN(trace_, DeviceTraceRing::Create(options.trace_capacity));
  lockstep_ = options.lockstep;
  lockstep_rank_ = options.lockstep_rank;
  if (lockstep_ != nullptr && lockstep_rank_ > 0) {
    BATON_ASSIGN_OR_RETURN(lockstep_copy_,
                           DeviceBuffer<std::uint32_t>::Create(lockstep_->record_words()));
  }
  *status_.host() = EngineStatus{};
  *control_staging_.host() = SchedulerControl{};
  const SchedulerCounters counters{};
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(counters_.data(), &counters, sizeof(counters), cudaMemcpyHostToDevice));
  return WriteControl(SchedulerControl{});
}

absl::Status LoopState::AttachBatch(std::uint32_t max_batch, const TokenPolicy& policy,
                                    const PagePolicy& pages) {
  if (has_batch()) return absl::FailedPreconditionError("LoopState: the batch is attached once");
  const std::uint32_t n = max_batch;
  BATON_ASSIGN_OR_RETURN(header_, DeviceBuffer<StepHeader>::Create(1));
  BATON_ASSIGN_OR_RETURN(items_, DeviceBuffer<WorkItem>::Create(n));
  BATON_ASSIGN_OR_RETURN(words_, DeviceBuffer<std::uint32_t>::Create(kStepWords * size_t{n}));
  BATON_ASSIGN_OR_RETURN(counts_, DeviceBuffer<BatchCounts>::Create(1));
  BATON_ASSIGN_OR_RETURN(free_slots_, DeviceBuffer<std::uint32_t>::Create(n));
  BATON_ASSIGN_OR_RETURN(retired_, DeviceBuffer<Completion>::Create(n));
  if (pages.paged()) {
    BATON_ASSIGN_OR_RETURN(free_pages_, DeviceBuffer<std::uint32_t>::Create(pages.pool_pages));
    BATON_ASSIGN_OR_RETURN(held_, DeviceBuffer<WorkItem>::Create(kHeldItems));
    BATON_RETURN_IF_ERROR(held_.Fill(0xFF));
  }
  BATON_RETURN_IF_ERROR(header_.Fill(0));
  BATON_RETURN_IF_ERROR(words_.Fill(0));
  // Every position holds an invalid item until one is admitted there, so a
  // copy of the batch never reads uninitialized memory (compute-sanitizer
  // initcheck does not see admissions made by device-launched schedulers).
  BATON_RETURN_IF_ERROR(items_.Fill(0xFF));
  max_batch_ = max_batch;
  policy_ = policy;
  pages_ = pages;
  return ResetBatch();
}

StepArgs LoopState::args() const {
  StepArgs args;
  args.header = header_.data();
  args.items = items_.data();
  args.max_batch = max_batch_;
  PointStepWords(args, words_.data());
  args.max_tokens = StepRowsLimit(policy_, max_batch_);
  return args;
}

SchedulerParams LoopState::scheduler_params() const {
  SchedulerParams params;
  params.queue = queue_.device_view();
  params.mailbox = mailbox_.device_view();
  params.args = args();
  params.book = BatchBook{counts_.data(), free_slots_.data(), retired_.data(), free_pages_.data(),
                          held_.data()};
  params.policy = policy_;
  params.pages = pages_;
  params.control = control_.data();
  params.counters = counters_.data();
  params.status = status_.device();
  params.observers.trace = trace_.view();
  if (lockstep_ != nullptr) {
    const LockstepGroup::Impl& group = lockstep_->impl();
    params.lockstep.channel = group.channel.data();
    params.lockstep.halves = group.halves_view();
    params.lockstep.copy = lockstep_copy_.data();
    params.lockstep.rank = lockstep_rank_;
    params.lockstep.ranks = lockstep_->ranks();
    params.lockstep.patience_ns =
        static_cast<unsigned long long>(absl::ToInt64Nanoseconds(group.options.patience));
  }
  return params;
}

std::uint64_t LoopState::exits() const {
  return cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(status_.host()->exits)
      .load(cuda::std::memory_order_acquire);
}

absl::Status LoopState::ResetBatch() {
  if (!has_batch()) return absl::OkStatus();
  std::vector<std::uint32_t> free(max_batch_);
  for (std::uint32_t i = 0; i < max_batch_; ++i) free[i] = max_batch_ - 1 - i;
  BATON_RETURN_IF_ERROR(free_slots_.CopyFrom(free));
  // Every page free, page 0 on top (HostBatch starts the same way).
  BatchCounts counts{0, max_batch_, 0, 0};
  if (pages_.paged()) {
    std::vector<std::uint32_t> pages(pages_.pool_pages);
    for (std::uint32_t i = 0; i < pages_.pool_pages; ++i) pages[i] = pages_.pool_pages - 1 - i;
    BATON_RETURN_IF_ERROR(free_pages_.CopyFrom(pages));
    counts.free_pages = pages_.pool_pages;
  }
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(counts_.data(), &counts, sizeof(counts), cudaMemcpyHostToDevice));
  const std::uint32_t zero = 0;
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&counters_.data()->step_pending, &zero, sizeof(zero), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status LoopState::ClearLockstepEnd() {
  if (lockstep_ == nullptr) return absl::OkStatus();
  // On the launch stream: ordered after the last run and before the next,
  // with no wait on the host.
  BATON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&counters_.data()->lockstep_ended, 0,
                                             sizeof(std::uint32_t), launch_stream_.get()));
  return absl::OkStatus();
}

absl::Status LoopState::WriteControl(const SchedulerControl& control) {
  *control_staging_.host() = control;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(control_.data(), control_staging_.host(),
                                             sizeof(control), cudaMemcpyHostToDevice,
                                             control_stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(control_stream_.get()));
  return absl::OkStatus();
}

absl::StatusOr<SchedulerCounters> LoopState::ReadCounters() const {
  SchedulerCounters counters{};
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&counters, counters_.data(), sizeof(counters),
                                             cudaMemcpyDeviceToHost, control_stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(control_stream_.get()));
  return counters;
}

absl::StatusOr<std::uint64_t> LoopState::ReadSteps() const {
  unsigned long long steps = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&steps, &counters_.data()->steps, sizeof(steps),
                                             cudaMemcpyDeviceToHost, control_stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(control_stream_.get()));
  return steps;
}

absl::StatusOr<BatchCounts> LoopState::ReadBatchCounts() const {
  BatchCounts counts{};
  if (!has_batch()) return counts;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&counts, counts_.data(), sizeof(counts),
                                             cudaMemcpyDeviceToHost, control_stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(control_stream_.get()));
  return counts;
}

absl::StatusOr<std::vector<WorkItem>> LoopState::ReadActiveItems() const {
  if (!has_batch()) return std::vector<WorkItem>{};
  BatchCounts counts{};
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&counts, counts_.data(), sizeof(counts), cudaMemcpyDeviceToHost));
  std::vector<WorkItem> items(counts.batch + counts.held);
  if (counts.batch > 0) {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(items.data(), items_.data(),
                                          counts.batch * sizeof(WorkItem), cudaMemcpyDeviceToHost));
  }
  // Items taken from the queue that were waiting for pages: in flight too.
  if (counts.held > 0) {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(items.data() + counts.batch, held_.data(),
                                          counts.held * sizeof(WorkItem), cudaMemcpyDeviceToHost));
  }
  return items;
}

}  // namespace baton::detail
