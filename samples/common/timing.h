// Timing with CUDA events the way METHOD.md asks: warm up, repeat, report the
// median, and keep every repeat so spread is visible.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::samples {

struct TimingSummary {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  std::vector<double> samples_ms;
};

[[nodiscard]] TimingSummary Summarize(std::vector<double> samples_ms);

// The q-quantile (0 <= q <= 1) of `v` by nearest rank (index q * (n - 1),
// rounded); 0 for an empty `v`. Median: q = 0.5 (the upper middle when n
// is even).
[[nodiscard]] double Percentile(std::vector<double> v, double q);
[[nodiscard]] inline double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// Runs `body` `warmup` times, then `repeats` times between two events recorded
// on `stream`, and summarizes the per-repeat milliseconds. `body` enqueues work
// (and may synchronize, for host-driven loops); a non-OK Status stops timing.
// `setup`, when given, runs before each repetition outside the timed region
// (e.g. resetting state).
[[nodiscard]] absl::StatusOr<TimingSummary> TimeWithEvents(
    cudaStream_t stream, int warmup, int repeats, const std::function<absl::Status()>& body,
    const std::function<absl::Status()>& setup = nullptr);

}  // namespace baton::samples
