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

  // Replays the graph of a full batch `steps` times with no copies or
  // synchronization between steps: the host's lower bound for the same GPU
  // work. Every position holds `item` at step `item_step`.
  [[nodiscard]] absl::Status EnqueueReplays(const WorkItem& item, std::uint32_t item_step,
                                            int steps);

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
  std::uint64_t steps_ = 0;
};

}  // namespace baton::samples
