// A host-driven decode loop over a step program, written with Baton's public
// API as a user would: the reference the engines' tokens are compared with.
// The host makes every step's decision with the batch policy's scalar
// functions (baton/batch_policy.h, the rules the device scheduler follows):
// it retires the items the last step finished, admits waiting items into
// free slots, plans the step's tokens, picks the bucket, copies the step's
// arguments to the device, launches that bucket's graph (captured once from
// the program's enqueue), copies back which items finished and waits for
// them before it decides again. Over a tensor-parallel model's ranks
// (CreateRanks) it decides each step once and launches it on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/batch_policy.h"
#include "baton/completion.h"
#include "baton/cuda_resources.h"
#include "baton/host_batch.h"
#include "baton/step_args.h"
#include "baton/step_program.h"

namespace baton::testing {

class HostDecodeLoop {
 public:
  // One graph per bucket of `program` (what DecoderModel::MakeStepProgram
  // gives the engines), which must name its max_batch; the program's model
  // must outlive the loop.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostDecodeLoop>> Create(
      const StepProgram& program);
  // One loop over ranks: programs[r] on CUDA device devices[r] (each rank's
  // model's MakeStepProgram, the same buckets); results from rank 0's.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostDecodeLoop>> CreateRanks(
      const std::vector<StepProgram>& programs, const std::vector<int>& devices);

  // Runs `items` to completion, admitting them in the order given; returns
  // their completions in the order they finished.
  [[nodiscard]] absl::StatusOr<std::vector<Completion>> Run(absl::Span<const WorkItem> items);

  // Steps run so far.
  [[nodiscard]] std::uint64_t steps() const { return step_; }

 private:
  HostDecodeLoop() = default;

  // One step of positions [0, batch) in bucket `bucket` with `rows` rows;
  // fills finished_ and results_.
  absl::Status Step(std::uint32_t batch, std::uint32_t rows, std::uint32_t bucket);

  // A GPU's copy of the step: its program's page table, stream, the batch's
  // device copy and the graphs.
  struct Rank {
    int device = 0;
    PagePolicy pages;  // the program's (Step uploads the batch's page table)
    Stream stream;
    DeviceBuffer<StepHeader> header;
    DeviceBuffer<WorkItem> items;
    DeviceBuffer<std::uint32_t> words;  // slots .. results, StepArgs' order
    StepArgs args;
    std::vector<GraphExec> graphs;  // by bucket
  };

  std::uint32_t max_batch_ = 0;
  TokenPolicy policy_;
  std::vector<std::uint32_t> buckets_;
  std::unique_ptr<HostBatch> batch_;  // the batch as the policy keeps it (host)
  std::vector<Rank> ranks_;
  std::uint64_t step_ = 0;  // StepHeader::step of the next step
};

}  // namespace baton::testing
