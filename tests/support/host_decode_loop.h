// A host-driven decode loop over a DecoderModel, written with Baton's public
// API as a user would: the reference the engines' tokens are compared with.
// The host makes every step's decision: it retires the items the last step
// finished (keeping the others in order), admits waiting entries into the
// lowest free slots, picks the smallest bucket that holds the batch, copies
// the step's arguments to the device, launches that bucket's graph (captured
// once from DecoderModel::EnqueueStep), copies back which items finished and
// waits for them before it decides again.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/completion.h"
#include "baton/cuda_resources.h"
#include "baton/decoder_model.h"
#include "baton/step_args.h"

namespace baton::testing {

class HostDecodeLoop {
 public:
  // One graph per bucket: sizes strictly increasing, the largest at most the
  // model's max_batch.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HostDecodeLoop>> Create(
      DecoderModel& model, std::vector<std::uint32_t> buckets);

  // Runs the model's request-table entries to completion, admitting them in
  // the order given; returns their completions in the order they finished.
  [[nodiscard]] absl::StatusOr<std::vector<Completion>> Run(
      absl::Span<const std::uint32_t> entries);

 private:
  HostDecodeLoop() = default;

  // An admitted item: where it lives and how many steps it has run.
  struct Active {
    WorkItem item;
    std::uint32_t slot = 0;
    std::uint32_t steps = 0;
  };

  // One step of `active` (its positions in order) in bucket `bucket`; returns
  // each position's finished flag and result.
  absl::Status Step(const std::vector<Active>& active, std::uint32_t bucket,
                    std::vector<std::uint32_t>& finished, std::vector<std::uint32_t>& results);

  std::uint32_t max_batch_ = 0;
  std::vector<std::uint32_t> buckets_;
  Stream stream_;
  DeviceBuffer<StepHeader> header_;
  DeviceBuffer<WorkItem> items_;
  DeviceBuffer<std::uint32_t> slots_;
  DeviceBuffer<std::uint32_t> item_steps_;
  DeviceBuffer<std::uint32_t> finished_;
  DeviceBuffer<std::uint32_t> results_;
  std::vector<GraphExec> graphs_;  // by bucket
  std::uint64_t step_ = 0;         // StepHeader::step of the next step
};

}  // namespace baton::testing
