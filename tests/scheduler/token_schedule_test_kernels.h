// The step program token_schedule_gpu_test drives, behind a plain C++
// interface: it records every step's header and positions, and finishes
// items the way a decoder finishes requests.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/batch_policy.h"
#include "baton/config.h"
#include "baton/step_args.h"

namespace baton::test {

// One position of a recorded step.
struct RecordedPosition {
  std::uint32_t id = 0;
  std::uint32_t slot = 0;
  std::uint32_t item_tokens = 0;
  std::uint32_t tokens = 0;
  std::uint32_t offset = 0;
};

// How many tokens item `id` produces once its input is read (1 to 5).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t OutputsOf(std::uint32_t id) {
  return id % 5 + 1;
}

// Whether the step in which an item of `input` tokens ran `tokens` after
// `ran` is its last: like a decoder request, it produces a token once its
// whole input is read and every step after, and ends after OutputsOf(id).
[[nodiscard]] BATON_HOST_DEVICE constexpr bool FinishesNow(std::uint32_t id, std::uint32_t input,
                                                           std::uint32_t ran,
                                                           std::uint32_t tokens) {
  const std::uint32_t produced = ran + tokens;
  return tokens > 0 && produced >= input && produced - input + 1 >= OutputsOf(id);
}

// One step, sized for `bucket_size` rows: records header.step's header into
// headers[step] and its positions into positions[step * max_batch + p] while
// step < max_steps, and finishes items by FinishesNow (value OutputsOf).
[[nodiscard]] cudaError_t EnqueueRecordingStep(const StepArgs& args, std::uint32_t bucket_size,
                                               StepHeader* headers, RecordedPosition* positions,
                                               std::uint32_t max_steps, cudaStream_t stream);

}  // namespace baton::test
