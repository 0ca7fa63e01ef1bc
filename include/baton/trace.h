// The device trace as Chrome / Perfetto trace JSON (chrome://tracing,
// ui.perfetto.dev): one "X" slice per step (args: step, batch, bucket, items
// retired), instant events for admits, exits and device errors; timestamps in
// microseconds from the first event. Get the events with Runtime::Trace().
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "baton/trace_event.h"

namespace baton {

// "step_begin", "step_end", "admit", "exit", "error".
[[nodiscard]] absl::string_view TraceEventTypeName(TraceEventType type);

// One line for logs and Status messages, e.g.
// "t=+12.345us step 41 step_begin batch=8 bucket=2"; `origin_ns` is the time
// printed as 0.
[[nodiscard]] std::string FormatTraceEvent(const TraceEvent& event, unsigned long long origin_ns);

// The events (oldest first, as Runtime::Trace returns them) as trace JSON.
[[nodiscard]] std::string TraceJson(absl::Span<const TraceEvent> events);

// TraceJson written to `path`; InvalidArgument naming the path when it
// cannot be written.
[[nodiscard]] absl::Status WriteTraceJson(absl::Span<const TraceEvent> events,
                                          const std::string& path);

}  // namespace baton
