#include "common/timing.h"

#include <algorithm>

#include "baton/cuda_resources.h"
#include "baton/status.h"

namespace baton::samples {

TimingSummary Summarize(std::vector<double> samples_ms) {
  TimingSummary summary;
  if (samples_ms.empty()) return summary;
  std::vector<double> sorted = samples_ms;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  summary.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  summary.min_ms = sorted.front();
  summary.max_ms = sorted.back();
  summary.samples_ms = std::move(samples_ms);
  return summary;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))];
}

absl::StatusOr<TimingSummary> TimeWithEvents(cudaStream_t stream, int warmup, int repeats,
                                             const std::function<absl::Status()>& body,
                                             const std::function<absl::Status()>& setup) {
  BATON_ASSIGN_OR_RETURN(Event start, CreateEvent());
  BATON_ASSIGN_OR_RETURN(Event stop, CreateEvent());
  for (int i = 0; i < warmup; ++i) {
    if (setup) BATON_RETURN_IF_ERROR(setup());
    BATON_RETURN_IF_ERROR(body());
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::vector<double> samples;
  samples.reserve(repeats);
  for (int i = 0; i < repeats; ++i) {
    if (setup) BATON_RETURN_IF_ERROR(setup());
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
    BATON_RETURN_IF_ERROR(body());
    BATON_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
    BATON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float ms = 0;
    BATON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    samples.push_back(ms);
  }
  return Summarize(std::move(samples));
}

}  // namespace baton::samples
