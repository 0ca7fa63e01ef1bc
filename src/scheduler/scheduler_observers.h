// What the scheduler publishes for the host to watch the loop without
// synchronizing: a progress word for the watchdog and, when on, the device
// trace ring. Part of SchedulerParams. Abseil-free.
#pragma once

#include <cstdint>

#include "baton/trace_event.h"

namespace baton::detail {

// A ring of `mask + 1` events (a power of two) in device memory. `head`
// counts the events ever written; event i lives in slot i & mask. Off when
// `events` is null: the scheduler then pays one pointer test per event.
struct TraceRing {
  TraceEvent* events = nullptr;
  unsigned long long* head = nullptr;  // device memory
  std::uint32_t mask = 0;
};

struct SchedulerObservers {
  TraceRing trace;
  // Mapped host memory (device pointer): the number of steps launched, stored
  // every step so the host watchdog sees progress without a copy. Null when
  // the watchdog is off.
  unsigned long long* progress = nullptr;
};

}  // namespace baton::detail
