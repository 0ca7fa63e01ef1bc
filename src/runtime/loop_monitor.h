// Watching a running loop from the host without synchronizing with it: the
// watchdog (no step began within RuntimeOptions::watchdog_timeout) and the
// health check (a fault that lost the CUDA context ends the loop silently),
// and the messages they produce. Internal to the runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "baton/engine.h"
#include "loop_state.h"
#include "progress_watchdog.h"

namespace baton::detail {

class LoopMonitor {
 public:
  LoopMonitor(const LoopState* state, absl::Duration watchdog_timeout);

  // An engine run was launched at `now`: the watchdog's clock starts again.
  void Armed(absl::Time now) { watchdog_.Arm(now, seen_steps_); }

  // While an engine runs: a context lost to a fault (checked at most every
  // millisecond with a stream query), and with `check_stall` the watchdog.
  // OK, a lost context (context_lost() is then true: the caller fails the
  // runtime with this Status), or DeadlineExceeded for a stall.
  [[nodiscard]] absl::Status Watch(absl::string_view op, Engine engine, bool check_stall);

  // The Status of a sticky CUDA error seen by `op` (and context_lost() from now on).
  [[nodiscard]] absl::Status ContextLost(absl::string_view op, Engine engine, cudaError_t error);
  [[nodiscard]] bool context_lost() const { return context_lost_; }

  // The step the loop is in, for messages, as of the host's last look.
  [[nodiscard]] std::string StepDescription() const;
  // The newest trace events as lines for a Status, or how to get them.
  [[nodiscard]] std::string RecentEvents() const;

 private:
  const LoopState* state_;
  ProgressWatchdog watchdog_;
  absl::Duration progress_period_;
  absl::Time last_progress_read_ = absl::InfinitePast();
  absl::Time last_health_check_ = absl::InfinitePast();
  std::uint64_t seen_steps_ = 0;  // steps launched, as of the last read
  bool context_lost_ = false;
};

}  // namespace baton::detail
