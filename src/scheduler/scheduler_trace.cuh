// Device side of the trace ring and the progress word (scheduler_observers.h).
// Called by the scheduler warp's leader lane only, and only one scheduler runs
// at a time (the engines serialize them), so the ring has a single writer.
#pragma once

#include <cuda/atomic>

#include "scheduler_observers.h"

namespace baton::detail {

// Nanoseconds of the GPU's global timer (the clock Nsight uses to place
// device work on a timeline).
[[nodiscard]] __device__ inline unsigned long long global_timer_ns() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// Writes the event, then publishes it by advancing the head (release), so a
// host copy that reads the head first never counts a slot not yet written.
__device__ inline void trace_record(const TraceRing& ring, TraceEventType type,
                                    unsigned long long step, std::uint32_t a, std::uint32_t b) {
  if (ring.events == nullptr) return;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> head(*ring.head);
  const unsigned long long index = head.load(cuda::std::memory_order_relaxed);
  TraceEvent event;
  event.time_ns = global_timer_ns();
  event.step = step;
  event.sequence = static_cast<std::uint32_t>(index);
  event.type = type;
  event.a = a;
  event.b = b;
  ring.events[index & ring.mask] = event;
  head.store(index + 1, cuda::std::memory_order_release);
}

// One posted store across the bus per step; relaxed because the host only
// compares successive values.
__device__ inline void publish_progress(const SchedulerObservers& observers,
                                        unsigned long long steps) {
  if (observers.progress == nullptr) return;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system>(*observers.progress)
      .store(steps, cuda::std::memory_order_relaxed);
}

}  // namespace baton::detail
