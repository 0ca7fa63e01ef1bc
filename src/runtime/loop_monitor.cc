#include "loop_monitor.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "baton/trace.h"

namespace baton::detail {
namespace {

// While an engine runs, Watch checks at most this often with a stream query
// whether a fault has lost the context (a fault ends the loop silently).
constexpr absl::Duration kHealthCheckPeriod = absl::Milliseconds(1);
// Trace events quoted in a watchdog or stop-timeout Status.
constexpr size_t kEventsInStatus = 8;

}  // namespace

LoopMonitor::LoopMonitor(const LoopState* state, absl::Duration watchdog_timeout)
    : state_(state),
      watchdog_(watchdog_timeout),
      // A tenth of the timeout keeps the detection delay near the timeout
      // while costing Poll one small copy per period at most.
      progress_period_(
          std::clamp(watchdog_timeout / 10, absl::Milliseconds(1), absl::Milliseconds(100))) {}

absl::Status LoopMonitor::Watch(absl::string_view op, Engine engine, bool check_stall) {
  const absl::Time now = absl::Now();
  if (now - last_health_check_ >= kHealthCheckPeriod) {
    last_health_check_ = now;
    const cudaError_t error = cudaStreamQuery(state_->launch_stream());
    if (IsStickyCudaError(error)) return ContextLost(op, engine, error);
  }
  if (!check_stall || !watchdog_.enabled()) return absl::OkStatus();
  if (now - last_progress_read_ >= progress_period_) {
    last_progress_read_ = now;
    // The step counter through the copy engine: the device pays nothing for
    // being watched. A failed read keeps the last value.
    const absl::StatusOr<std::uint64_t> steps = state_->ReadSteps();
    if (steps.ok()) seen_steps_ = *steps;
  }
  const absl::Duration still = watchdog_.StillFor(now, seen_steps_);
  if (still <= watchdog_.timeout()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      op, ": watchdog: the ", EngineName(engine), " engine made no progress for ",
      absl::FormatDuration(still), " (RuntimeOptions.watchdog_timeout ",
      absl::FormatDuration(watchdog_.timeout()), "): ", StepDescription(),
      " has not finished, so a step kernel may be stuck or spinning. Call Abort() to end the "
      "loop at the next step boundary and get the in-flight items back (it waits up to "
      "RuntimeOptions.stop_timeout); if the step never ends, the process must exit.",
      RecentEvents()));
}

absl::Status LoopMonitor::ContextLost(absl::string_view op, Engine engine, cudaError_t error) {
  context_lost_ = true;
  return absl::Status(
      CudaErrorCode(error),
      absl::StrCat(op, ": the ", EngineName(engine),
                   " engine's device loop hit a sticky CUDA error, ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), "), during or after ", StepDescription(),
                   ": a step kernel trapped or faulted (e.g. an out-of-bounds access). The CUDA "
                   "context of this process is lost and every later CUDA call in it fails: "
                   "destroy the Runtime and restart the process (compute-sanitizer memcheck "
                   "names the faulting kernel)."));
}

std::string LoopMonitor::StepDescription() const {
  return absl::StrCat("step ", seen_steps_ == 0 ? 0 : seen_steps_ - 1,
                      " (the last one the host saw begin)");
}

std::string LoopMonitor::RecentEvents() const {
  if (!state_->trace().enabled()) {
    return " Set RuntimeOptions.trace_capacity to see the scheduler's last events here.";
  }
  const absl::StatusOr<std::vector<TraceEvent>> events =
      state_->trace().Snapshot(state_->control_stream(), kEventsInStatus);
  if (!events.ok() || events->empty()) return " No trace events could be read.";
  std::string text = " Last trace events:";
  for (const TraceEvent& event : *events) {
    absl::StrAppend(&text, "\n  ", FormatTraceEvent(event, events->front().time_ns));
  }
  return text;
}

}  // namespace baton::detail
