// The device trace ring as kernels see it: passed by value (inside the
// scheduler's parameters), written by trace/trace_writer.cuh, owned and read
// by the host through trace/trace_ring.h. Abseil-free.
#pragma once

#include <cstdint>

#include "baton/trace_event.h"

namespace baton::detail {

// A ring of `mask + 1` events (a power of two) in device memory. `head`
// counts the events ever written; event i lives in slot i & mask. Off when
// `events` is null: the writer then pays one pointer test per event.
struct TraceRing {
  TraceEvent* events = nullptr;
  unsigned long long* head = nullptr;  // device memory
  std::uint32_t mask = 0;
};

}  // namespace baton::detail
