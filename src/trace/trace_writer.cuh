// Device side of the trace ring (trace/trace_ring_view.h). Only the scheduler
// warp's leader lane writes, and only one scheduler runs at a time (the
// engines serialize them), so the ring has a single writer. A decision opens
// a cursor (the head load issues with the scheduler's other loads), writes
// its events with plain stores, and publishes them with one release store of
// the head: one fence per decision, none when the trace is off.
#pragma once

#include <cuda/atomic>

#include "trace/trace_ring_view.h"

namespace baton::detail {

// Nanoseconds of the GPU's global timer (the clock Nsight uses to place
// device work on a timeline).
[[nodiscard]] __device__ inline unsigned long long global_timer_ns() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

struct TraceCursor {
  TraceRing ring;                // events == nullptr: off (or not the leader)
  unsigned long long head = 0;   // the next event's index
  unsigned long long start = 0;  // the head when opened
};

[[nodiscard]] __device__ inline TraceCursor trace_open(const TraceRing& ring, bool leader) {
  TraceCursor cursor;
  if (ring.events == nullptr || !leader) return cursor;
  cursor.ring = ring;
  cursor.head = *ring.head;
  cursor.start = cursor.head;
  return cursor;
}

__device__ inline void trace_record(TraceCursor& cursor, TraceEventType type,
                                    unsigned long long step, std::uint32_t a, std::uint32_t b) {
  if (cursor.ring.events == nullptr) return;
  TraceEvent event;
  event.time_ns = global_timer_ns();
  event.step = step;
  event.sequence = static_cast<std::uint32_t>(cursor.head);
  event.type = type;
  event.a = a;
  event.b = b;
  cursor.ring.events[cursor.head & cursor.ring.mask] = event;
  ++cursor.head;
}

// Publishes the events written since trace_open: a host copy that reads the
// head first never counts a slot not yet written.
__device__ inline void trace_close(TraceCursor& cursor) {
  if (cursor.ring.events == nullptr || cursor.head == cursor.start) return;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*cursor.ring.head)
      .store(cursor.head, cuda::std::memory_order_release);
  cursor.start = cursor.head;
}

}  // namespace baton::detail
