// The baseline Baton replaces: the same decoder model driven from the host the
// way PyTorch/vLLM-style loops drive it. Each step the host schedules the
// batch with the batch policy Baton's device scheduler follows
// (baton/batch_policy.h: retire, admit into free slots, plan the step's
// tokens, pick the bucket), copies the step arguments to the device, launches
// the bucket's CUDA graph (the same kernels the engines run), copies the
// finished flags back and synchronizes before it can decide the next step.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/batch_policy.h"
#include "baton/completion.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"

namespace baton::samples {

// Consecutive steps of one shape: a piece of a schedule.
struct ScheduleRun {
  std::uint32_t batch = 0;  // active items in every step of the run
  std::uint32_t rows = 0;   // rows in every step
  std::uint32_t steps = 0;  // steps in the run
  // A run of decode steps (every item one token; at most
  // HostLoop::kReplayStepsPerGraph of them): the items' mean tokens before
  // the step (attention's context), rounded. A step that reads
  // prompt chunks is a run of its own with each position's tokens before it
  // and this step's (`chunks`).
  std::uint32_t item_tokens = 0;
  struct Position {
    std::uint32_t ran = 0, tokens = 0;
    bool reading = false;  // still reading its prompt
  };
  std::vector<Position> chunks;  // empty for decode runs
};

// The steps that `count` requests of `prompt` tokens and `new_tokens` new
// tokens each (no stop tokens), all queued before the first step, take under
// the batch policy with `policy` and `max_batch`, as runs (pure; no GPU).
[[nodiscard]] std::vector<ScheduleRun> ScheduleRuns(std::uint32_t count, std::uint32_t prompt,
                                                    std::uint32_t new_tokens,
                                                    std::uint32_t max_batch,
                                                    const TokenPolicy& policy);
[[nodiscard]] std::uint64_t ScheduleSteps(absl::Span<const ScheduleRun> runs);

class HostLoop {
 public:
  // Captures one host-launched graph per bucket of `program` (what
  // DecoderModel::MakeStepProgram gives the engines).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostLoop>> Create(const StepProgram& program);
  // One loop over a tensor-parallel model's ranks: `programs[r]` is rank
  // r's (its model's MakeStepProgram), on CUDA device `devices[r]`. Every
  // step is decided once and launched on every rank; results come back
  // from rank 0 (every rank chooses the same tokens).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostLoop>> CreateRanks(
      const std::vector<StepProgram>& programs, const std::vector<int>& devices);

  // Runs `items` to completion, admitting in order; appends their completions.
  // Steps are numbered from `first_step` (the model's step clock).
  // `after_step`, when given, runs once each step has finished (its tokens
  // are visible to the host).
  [[nodiscard]] absl::Status Run(absl::Span<const WorkItem> items, std::uint64_t first_step,
                                 std::vector<Completion>& completions,
                                 const std::function<void()>& after_step = nullptr);

  // Steps per graph in a schedule replay: a quarter of the graph boundaries
  // of the engines' default four steps per launch or loop iteration.
  static constexpr std::uint32_t kReplayStepsPerGraph = 16;

  // Prepares EnqueueScheduleReplay for `runs` of `model` (this loop's
  // program's model): each run's step arguments, staged in device memory,
  // with position p in slot p running `decoding` (an entry past its prompt)
  // or, for a prompt chunk, `reading` (an entry whose prompt is long enough),
  // and for each bucket the runs use a graph of kReplayStepsPerGraph steps.
  [[nodiscard]] absl::Status PrepareScheduleReplay(const StepProgram& program,
                                                   std::vector<ScheduleRun> runs,
                                                   const WorkItem& decoding,
                                                   const WorkItem& reading);
  // The same for every rank of a CreateRanks loop (`programs` as given there).
  [[nodiscard]] absl::Status PrepareScheduleReplay(const std::vector<StepProgram>& programs,
                                                   std::vector<ScheduleRun> runs,
                                                   const WorkItem& decoding,
                                                   const WorkItem& reading);

  // Enqueues the prepared runs' steps with no decision, no copy down and no
  // synchronization: per run, one device-side copy of its arguments, then its
  // bucket's multi-step graph back to back (single-step graphs for the rest).
  // The same kernels, buckets, rows and batches as a driver that ran this
  // schedule, with decode attention at each run's mean length, but no
  // scheduler and a graph boundary only every kReplayStepsPerGraph steps: a
  // lower bound on that driver's time for the same work.
  [[nodiscard]] absl::Status EnqueueScheduleReplay();

  [[nodiscard]] std::uint64_t steps() const { return steps_; }
  // Rank 0's stream (the only one without tensor parallelism).
  [[nodiscard]] cudaStream_t stream() const { return ranks_[0].stream.get(); }
  [[nodiscard]] int ranks() const { return static_cast<int>(ranks_.size()); }
  [[nodiscard]] cudaStream_t stream(int rank) const { return ranks_[rank].stream.get(); }
  [[nodiscard]] int device(int rank) const { return ranks_[rank].device; }

 private:
  // One GPU's share of the loop: its program's page table, its stream, its
  // copy of the step arguments and its graphs.
  struct Rank {
    int device = 0;
    PagePolicy pages;  // the program's: Run uploads its table, the replay writes one
    Stream stream;
    // [header | items | slots | item_steps | item_tokens | tokens |
    // token_offsets | finished | results], one copy up per step;
    // [finished | results] one copy down (rank 0's).
    DeviceBuffer<unsigned char> device_args_bytes;
    StepArgs device_args;
    std::vector<GraphExec> graphs;
    DeviceBuffer<unsigned char> replay_args;  // the runs' staged arguments (up_bytes_ each)
    std::vector<GraphExec> replay_graphs;     // the multi-step graphs by bucket index
  };

  HostLoop() = default;
  absl::Status Upload(std::uint32_t batch, std::uint32_t rows, std::uint32_t bucket,
                      std::uint64_t step);

  std::uint32_t max_batch_ = 0;
  TokenPolicy policy_;
  std::vector<std::uint32_t> buckets_;
  std::vector<Rank> ranks_;
  MappedHostBuffer<unsigned char> host_;
  StepArgs host_args_;
  std::size_t up_bytes_ = 0;
  std::size_t down_offset_ = 0;
  std::size_t down_bytes_ = 0;
  // Schedule replay: the runs and their buckets.
  std::vector<ScheduleRun> replay_runs_;
  std::vector<std::uint32_t> replay_buckets_;
  std::uint64_t steps_ = 0;
};

}  // namespace baton::samples
