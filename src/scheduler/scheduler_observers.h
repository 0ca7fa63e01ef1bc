// What the scheduler publishes for the host to watch the loop without
// synchronizing: when on, the device trace ring. (The watchdog needs nothing
// here: it reads the scheduler's step counter through the copy engine.) Part
// of SchedulerParams. Abseil-free.
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
};

}  // namespace baton::detail
