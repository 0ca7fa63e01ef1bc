#include "trace/trace_ring.h"

#include <algorithm>

#include "baton/status.h"

namespace baton::detail {
namespace {

// The most events one scheduler decision writes before it publishes them
// (step end, admit, step begin; an exit publishes its own two), with margin.
constexpr unsigned long long kMaxUnpublished = 4;

}  // namespace

absl::StatusOr<DeviceTraceRing> DeviceTraceRing::Create(std::uint32_t capacity) {
  DeviceTraceRing ring;
  if (capacity == 0) return ring;
  BATON_ASSIGN_OR_RETURN(ring.events_, DeviceBuffer<TraceEvent>::Create(capacity));
  BATON_ASSIGN_OR_RETURN(ring.head_, DeviceBuffer<unsigned long long>::Create(1));
  BATON_RETURN_IF_ERROR(ring.events_.Fill(0));
  BATON_RETURN_IF_ERROR(ring.head_.Fill(0));
  return ring;
}

TraceRing DeviceTraceRing::view() const {
  TraceRing ring;
  if (!enabled()) return ring;
  ring.events = events_.data();
  ring.head = head_.data();
  ring.mask = static_cast<std::uint32_t>(events_.size() - 1);
  return ring;
}

absl::StatusOr<std::vector<TraceEvent>> DeviceTraceRing::Snapshot(cudaStream_t stream,
                                                                  size_t max_events) const {
  std::vector<TraceEvent> events;
  if (!enabled()) return events;
  const size_t capacity = events_.size();
  std::vector<TraceEvent> slots(capacity);
  unsigned long long head_before = 0;
  unsigned long long head_after = 0;
  // Pageable host memory: each copy is staged and returns once it is done,
  // so the three reads happen in this order.
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&head_before, head_.data(), sizeof(head_before),
                                             cudaMemcpyDeviceToHost, stream));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slots.data(), events_.data(), events_.bytes(),
                                             cudaMemcpyDeviceToHost, stream));
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&head_after, head_.data(), sizeof(head_after),
                                             cudaMemcpyDeviceToHost, stream));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  // Events [first, head_before) were complete before the copy began. While
  // it ran, the writer published events up to head_after and may have been
  // writing the next decision's events, up to kMaxUnpublished of them, not
  // yet published (possibly half written): all of those reused the slots of
  // events below head_after + kMaxUnpublished - capacity, which are dropped.
  unsigned long long first = head_before > capacity ? head_before - capacity : 0;
  if (head_after + kMaxUnpublished > capacity) {
    first = std::max<unsigned long long>(first, head_after + kMaxUnpublished - capacity);
  }
  if (max_events > 0 && head_before - first > max_events) first = head_before - max_events;
  for (unsigned long long i = first; i < head_before; ++i) {
    const TraceEvent& event = slots[i % capacity];
    if (event.sequence != static_cast<std::uint32_t>(i)) continue;  // not written as expected
    events.push_back(event);
  }
  return events;
}

}  // namespace baton::detail
