// Host side of the device trace ring (trace/trace_ring_view.h): owns its memory
// and copies the newest events out while the loop runs. Internal: the runtime
// owns one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/cuda_resources.h"
#include "baton/trace_event.h"
#include "trace/trace_ring_view.h"

namespace baton::detail {

class DeviceTraceRing {
 public:
  DeviceTraceRing() = default;
  // `capacity` 0 makes an off ring (view() has null pointers).
  [[nodiscard]] static absl::StatusOr<DeviceTraceRing> Create(std::uint32_t capacity);

  [[nodiscard]] bool enabled() const { return events_.size() > 0; }
  [[nodiscard]] TraceRing view() const;

  // The newest events (at most `max_events`, 0 = all the ring holds), oldest
  // first, copied on `stream` with asynchronous copies: the copy engine reads
  // while the scheduler keeps writing, so slots being overwritten during the
  // copy are left out rather than returned torn (the head is read before and
  // after the events, and only events older than the first read and not
  // reached by the second are kept).
  [[nodiscard]] absl::StatusOr<std::vector<TraceEvent>> Snapshot(cudaStream_t stream,
                                                                 size_t max_events) const;

 private:
  DeviceBuffer<TraceEvent> events_;
  DeviceBuffer<unsigned long long> head_;
};

}  // namespace baton::detail
