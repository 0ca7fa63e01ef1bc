// Host side of the device work queue: owns the ring's device memory, seeds it
// (also while kernels consume it), closes and drains it. Kernels use the ring
// through WorkQueue::device_view() and the device API in baton/work_queue.cuh,
// whose header comment states the guarantees (exactly-once, ticket order,
// bounded waits).
//
// Seeding while the device consumes: the host cannot do atomics on device
// memory, so Seed stages the items with cudaMemcpyAsync on the queue's own
// non-blocking stream and runs a push kernel of one 256-thread block there.
// That kernel needs room for one such block on some SM: a consumer grid that
// fills every SM and spins until close would keep it from ever starting (and
// Seed would wait for it). Size consumer grids
// to leave room (or let consumers exit when they find the queue empty) and
// launch them on a non-blocking stream. Close needs no SM (a DMA write).
// Seed, Close, Size and CheckDeviceError never allocate or free device memory
// (cudaFree synchronizes the whole device, which would wait for the
// consumers); Create, Drain and the destructor do. Create also loads the
// queue's kernels: under CUDA's lazy module loading a first launch can wait
// for running kernels, so consumer kernels that must co-run with a seed
// should likewise be launched (or cudaFuncGetAttributes'd) once beforehand,
// or the process run with CUDA_MODULE_LOADING=EAGER.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/cuda_resources.h"
#include "baton/work_item.h"

namespace baton {

struct WorkQueueOptions {
  // Slots in the ring; a power of two, at most kMaxCapacity.
  std::uint64_t capacity = 1u << 16;
  // The largest claim a single pop makes (warp and block pops clamp to it);
  // 1..capacity.
  std::uint32_t max_batch = 1024;
  // The first ticket. Tests start near 2^32 and 2^64 to cross the wraps.
  std::uint64_t first_ticket = 0;
  // Bound of every device wait on a slot, in sleeps of about 1 us (default
  // about 2 s): a wait that runs out becomes a device error, never a hang.
  std::uint32_t max_wait_spins = 1u << 21;

  static constexpr std::uint64_t kMaxCapacity = std::uint64_t{1} << 32;
};

class WorkQueue {
 public:
  // InvalidArgument for capacity 0, not a power of two or above kMaxCapacity,
  // max_batch 0 or above capacity, max_wait_spins 0.
  [[nodiscard]] static absl::Status Validate(const WorkQueueOptions& options);
  // InvalidArgument naming the first item that is not a valid descriptor
  // (a reserved kind: the sentinels cannot be pushed).
  [[nodiscard]] static absl::Status ValidateItems(absl::Span<const WorkItem> items);

  // Allocates and initializes an empty queue (synchronously).
  [[nodiscard]] static absl::StatusOr<WorkQueue> Create(const WorkQueueOptions& options);

  WorkQueue() = default;
  WorkQueue(WorkQueue&&) noexcept = default;
  WorkQueue& operator=(WorkQueue&&) noexcept = default;

  // Pushes `items` in order and returns once the device accepted them. When
  // the queue runs full it stops: ResourceExhausted says how many (a prefix of
  // `items`) were accepted, and *accepted (if given) holds that count in every
  // case. FailedPrecondition after Close. Safe while kernels consume (see the
  // file comment for what that needs).
  [[nodiscard]] absl::Status Seed(absl::Span<const WorkItem> items,
                                  std::size_t* accepted = nullptr);

  // Items accepted and not yet claimed by a consumer (tail - head). Exact
  // when no kernel is using the queue; a snapshot otherwise.
  [[nodiscard]] absl::StatusOr<std::uint64_t> Size() const;
  [[nodiscard]] std::uint64_t Capacity() const { return view_.capacity(); }

  // Promises that no more items will be pushed: consumers that find the queue
  // empty from then on get WorkItem::terminate(). Does not wait for them.
  [[nodiscard]] absl::Status Close();
  [[nodiscard]] bool closed() const { return closed_; }

  // Pops every item left (call when no kernel uses the queue) and returns them
  // in ticket (FIFO) order. Works on a closed queue too.
  [[nodiscard]] absl::StatusOr<std::vector<WorkItem>> Drain();

  // Empties the ring and reopens it; next ticket `first_ticket`. Only when no
  // kernel uses the queue.
  [[nodiscard]] absl::Status Reset(std::uint64_t first_ticket = 0);

  // OK, or the device error the queue recorded (a bounded wait that ran out).
  [[nodiscard]] absl::Status CheckDeviceError() const;

  // What kernels take (by value).
  [[nodiscard]] WorkQueueView device_view() const { return view_; }
  // The queue's own non-blocking stream (seeding, close, drain).
  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }

 private:
  template <typename T>
  [[nodiscard]] absl::StatusOr<T> ReadBack(const T* device) const;

  WorkQueueView view_;
  DeviceBuffer<WorkQueueCounters> counters_;
  DeviceBuffer<WorkItem> slots_;
  DeviceBuffer<unsigned long long> sequence_;
  DeviceBuffer<WorkItem> staging_;
  DeviceBuffer<std::uint64_t> result_;          // accepted / drained count
  MappedHostBuffer<std::uint64_t> host_word_;   // pinned landing place of result_
  MappedHostBuffer<std::uint32_t> close_flag_;  // pinned source of the closed flag
  Stream stream_;
  bool closed_ = false;
};

}  // namespace baton
