#include "baton/work_queue.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/status.h"
#include "work_queue_kernels.h"

namespace baton {
namespace {

// Seeds are staged in chunks so a huge span does not need a huge buffer. The
// staging buffer is allocated once, in Create: cudaFree (and at times
// cudaMalloc) synchronizes the whole device, so a Seed that reallocated would
// wait for a consumer grid that is waiting for the seed.
constexpr std::size_t kStageChunk = std::size_t{1} << 20;

bool IsPowerOfTwo(std::uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

absl::Status WorkQueue::Validate(const WorkQueueOptions& options) {
  if (!IsPowerOfTwo(options.capacity)) {
    std::uint64_t suggestion = 1;
    while (suggestion < options.capacity && suggestion < WorkQueueOptions::kMaxCapacity) {
      suggestion <<= 1;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "WorkQueueOptions.capacity is ", options.capacity,
        ": it must be a power of two (slot = ticket & (capacity - 1)); use for example ",
        options.capacity == 0 ? std::uint64_t{1} << 16 : suggestion));
  }
  if (options.capacity > WorkQueueOptions::kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("WorkQueueOptions.capacity is ", options.capacity, ": at most ",
                     WorkQueueOptions::kMaxCapacity, " slots are supported; use a smaller ring"));
  }
  if (options.max_batch == 0 || options.max_batch > options.capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("WorkQueueOptions.max_batch is ", options.max_batch,
                     ": it must be between 1 and the capacity (", options.capacity,
                     "), since one claim can never take more items than the ring holds"));
  }
  if (options.max_wait_spins == 0) {
    return absl::InvalidArgumentError(
        "WorkQueueOptions.max_wait_spins is 0: a device wait on a slot needs at least one try; "
        "keep the default (about 2 s) unless a test wants a quick timeout");
  }
  return absl::OkStatus();
}

absl::Status WorkQueue::ValidateItems(absl::Span<const WorkItem> items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "items[", i, "] has kind 0x", absl::Hex(items[i].kind), ", a reserved kind (>= 0x",
          absl::Hex(WorkItem::kFirstReservedKind),
          ": the invalid and terminate sentinels); give work items a kind below that"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkQueue> WorkQueue::Create(const WorkQueueOptions& options) {
  BATON_RETURN_IF_ERROR(Validate(options));
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  BATON_CUDA_RETURN_IF_ERROR(queue_kernels::PreloadKernels());
  WorkQueue queue;
  BATON_ASSIGN_OR_RETURN(queue.counters_, DeviceBuffer<WorkQueueCounters>::Create(1));
  BATON_ASSIGN_OR_RETURN(queue.slots_, DeviceBuffer<WorkItem>::Create(options.capacity));
  BATON_ASSIGN_OR_RETURN(queue.sequence_,
                         DeviceBuffer<unsigned long long>::Create(options.capacity));
  BATON_ASSIGN_OR_RETURN(queue.staging_, DeviceBuffer<WorkItem>::Create(std::min<std::uint64_t>(
                                             kStageChunk, options.capacity)));
  BATON_ASSIGN_OR_RETURN(queue.result_, DeviceBuffer<std::uint64_t>::Create(1));
  BATON_ASSIGN_OR_RETURN(queue.host_word_, MappedHostBuffer<std::uint64_t>::Create(1));
  BATON_ASSIGN_OR_RETURN(queue.close_flag_, MappedHostBuffer<std::uint32_t>::Create(1));
  BATON_ASSIGN_OR_RETURN(queue.stream_, CreateStream(cudaStreamNonBlocking));
  queue.view_.counters = queue.counters_.data();
  queue.view_.slots = queue.slots_.data();
  queue.view_.sequence = queue.sequence_.data();
  queue.view_.mask = options.capacity - 1;
  queue.view_.max_batch = options.max_batch;
  queue.view_.max_wait_spins = options.max_wait_spins;
  BATON_RETURN_IF_ERROR(queue.Reset(options.first_ticket));
  return queue;
}

absl::Status WorkQueue::Reset(std::uint64_t first_ticket) {
  // Zero the whole block first, padding between the 128-byte lines included, so
  // a snapshot copy (Size) never reads bytes nothing wrote.
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counters_.data(), 0, sizeof(WorkQueueCounters), stream()));
  BATON_CUDA_RETURN_IF_ERROR(queue_kernels::EnqueueInitialize(view_, first_ticket, stream()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  closed_ = false;
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> WorkQueue::ReadBack(const T* device) const {
  T value;
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&value, device, sizeof(T), cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  return value;
}

absl::Status WorkQueue::Seed(absl::Span<const WorkItem> items, std::size_t* accepted) {
  if (accepted != nullptr) *accepted = 0;
  if (counters_.data() == nullptr) {
    return absl::FailedPreconditionError("WorkQueue::Seed on a moved-from or default queue");
  }
  if (closed_) {
    return absl::FailedPreconditionError(
        "WorkQueue::Seed after Close(): a closed queue accepts no items; Reset() it (when no "
        "kernel uses it) or create another queue");
  }
  BATON_RETURN_IF_ERROR(ValidateItems(items));
  std::size_t total = 0;
  while (total < items.size()) {
    const std::size_t chunk = std::min(staging_.size(), items.size() - total);
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_.data(), items.data() + total,
                                               chunk * sizeof(WorkItem), cudaMemcpyHostToDevice,
                                               stream()));
    BATON_CUDA_RETURN_IF_ERROR(
        queue_kernels::EnqueueSeed(view_, staging_.data(), chunk, result_.data(), stream()));
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_word_.host(), result_.data(),
                                               sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                                               stream()));
    BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    const std::uint64_t taken = host_word_.host()[0];
    total += taken;
    if (accepted != nullptr) *accepted = total;
    if (taken < chunk) break;
  }
  BATON_RETURN_IF_ERROR(CheckDeviceError());
  if (total < items.size()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "WorkQueue::Seed accepted ", total, " of ", items.size(), " items: the queue (capacity ",
        Capacity(), ") is full. Nothing was dropped: items[", total,
        ", ...) were not pushed; seed them again once consumers made room, or create the queue "
        "with a larger capacity"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::uint64_t> WorkQueue::Size() const {
  WorkQueueCounters snapshot;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&snapshot, counters_.data(), sizeof(snapshot),
                                             cudaMemcpyDeviceToHost, stream_.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
  return snapshot.tail - snapshot.head;
}

absl::Status WorkQueue::Close() {
  if (counters_.data() == nullptr) {
    return absl::FailedPreconditionError("WorkQueue::Close on a moved-from or default queue");
  }
  close_flag_.host()[0] = 1;
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&counters_.data()->closed, close_flag_.host(),
                                             sizeof(std::uint32_t), cudaMemcpyHostToDevice,
                                             stream()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  closed_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkItem>> WorkQueue::Drain() {
  BATON_ASSIGN_OR_RETURN(const std::uint64_t size, Size());
  std::vector<WorkItem> items;
  if (size == 0) return items;
  if (size > Capacity()) {
    return absl::InternalError(absl::StrCat("WorkQueue::Drain: tail - head is ", size,
                                            ", more than the capacity ", Capacity(),
                                            "; the queue's counters are corrupt"));
  }
  BATON_ASSIGN_OR_RETURN(auto out, DeviceBuffer<WorkItem>::Create(size));
  BATON_CUDA_RETURN_IF_ERROR(
      queue_kernels::EnqueueDrain(view_, out.data(), size, result_.data(), stream()));
  BATON_ASSIGN_OR_RETURN(const std::uint64_t drained, ReadBack(result_.data()));
  BATON_RETURN_IF_ERROR(CheckDeviceError());
  items.resize(drained);
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(items.data(), out.data(), drained * sizeof(WorkItem),
                                             cudaMemcpyDeviceToHost, stream()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  return items;
}

absl::Status WorkQueue::CheckDeviceError() const {
  if (counters_.data() == nullptr) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(const std::uint32_t word, ReadBack(&counters_.data()->error_word));
  return DeviceErrorStatus(word, "work queue");
}

}  // namespace baton
