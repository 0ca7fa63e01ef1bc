// The baseline Baton replaces: the same decoder model driven from the host the
// way PyTorch/vLLM-style loops drive it. Each step the host schedules the
// batch (retire, compact, admit into free slots — the same policy as Baton's
// device scheduler), copies the step arguments to the device, launches the
// bucket's CUDA graph (the same kernels the engines run), copies the finished
// flags back and synchronizes before it can decide the next step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/completion.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"

namespace baton::samples {

// Consecutive steps at one batch size: a piece of a schedule.
struct ScheduleRun {
  std::uint32_t batch = 0;      // active items in every step of the run
  std::uint32_t steps = 0;      // steps in the run
  std::uint32_t item_step = 0;  // the run's items' mean item step (steps run before), rounded
};

// The steps that items of the given lengths (steps each, >= 1), all queued
// before the first step, take under the scheduling policy HostLoop shares
// with Baton's device scheduler (admit in order into free positions; an item
// retires after its last step and the next one is admitted for the following
// step), as runs of equal batch size (pure; no GPU).
[[nodiscard]] std::vector<ScheduleRun> ScheduleRuns(absl::Span<const std::uint32_t> lengths,
                                                    std::uint32_t max_batch);
[[nodiscard]] std::uint64_t ScheduleSteps(absl::Span<const ScheduleRun> runs);

class HostLoop {
 public:
  // Captures one host-launched graph per bucket (sizes strictly increasing,
  // the largest == the model's max_batch).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostLoop>> Create(
      DecoderModel& model, std::vector<std::uint32_t> buckets);

  // Runs `items` to completion, admitting in order; appends their completions.
  // Steps are numbered from `first_step` (the model's step clock).
  [[nodiscard]] absl::Status Run(absl::Span<const WorkItem> items, std::uint64_t first_step,
                                 std::vector<Completion>& completions);

  // Steps per graph in a schedule replay: a quarter of the graph boundaries
  // of the engines' default four steps per launch or loop iteration.
  static constexpr std::uint32_t kReplayStepsPerGraph = 16;

  // Prepares EnqueueScheduleReplay for `runs`: each run's step arguments
  // (position p holds `item` in slot p at the run's item_step), staged in
  // device memory, and for each bucket the runs use a graph of
  // kReplayStepsPerGraph steps captured from `model` (this loop's model).
  [[nodiscard]] absl::Status PrepareScheduleReplay(DecoderModel& model,
                                                   std::vector<ScheduleRun> runs,
                                                   const WorkItem& item);

  // Enqueues the prepared runs' steps with no decision, no copy down and no
  // synchronization: per run, one device-side copy of its arguments, then its
  // bucket's multi-step graph back to back (single-step graphs for the rest).
  // The same kernels, buckets and batches as a driver that ran this schedule,
  // with attention at each run's mean length, but no scheduler and a graph
  // boundary only every kReplayStepsPerGraph steps: a lower bound on that
  // driver's time for the same work.
  [[nodiscard]] absl::Status EnqueueScheduleReplay();

  [[nodiscard]] std::uint64_t steps() const { return steps_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }

 private:
  HostLoop() = default;
  absl::Status Upload(std::uint32_t batch, std::uint32_t bucket, std::uint64_t step);

  std::uint32_t max_batch_ = 0;
  std::vector<std::uint32_t> buckets_;
  Stream stream_;
  // Device: [header | items | slots | item_steps | finished | results], one
  // copy up per step; [finished | results] one copy down.
  DeviceBuffer<unsigned char> device_;
  MappedHostBuffer<unsigned char> host_;
  StepArgs device_args_;
  StepArgs host_args_;
  std::size_t up_bytes_ = 0;
  std::size_t down_offset_ = 0;
  std::size_t down_bytes_ = 0;
  std::vector<GraphExec> graphs_;
  std::vector<std::uint32_t> free_slots_;
  // Schedule replay: the runs, their buckets, their staged arguments
  // (up_bytes_ each) and the multi-step graphs by bucket index.
  std::vector<ScheduleRun> replay_runs_;
  std::vector<std::uint32_t> replay_buckets_;
  DeviceBuffer<unsigned char> replay_args_;
  std::vector<GraphExec> replay_graphs_;
  std::uint64_t steps_ = 0;
};

}  // namespace baton::samples
