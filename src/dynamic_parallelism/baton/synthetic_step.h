// The synthetic step program: K tiny kernels per step, the same on every
// engine. The graph engines capture its kernels through `enqueue`; the
// dynamic-parallelism engine launches the same kernel bodies from the device
// (StepProgram::device_step). Each kernel folds its index and the item's step
// into a per-item accumulator; an item finishes after `payload` steps (at
// least 1) with Completion::value == SyntheticExpectedValue(id, payload, K).
// Tests and launch_comparison use it to run the same work through every
// engine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/runtime.h"
#include "baton/synthetic_step_params.h"

namespace baton {

struct SyntheticStepOptions {
  std::string name = "synthetic step";
  std::uint32_t kernels = 3;  // K, in [1, kMaxSyntheticKernels]
  // The RuntimeOptions::max_batch it will serve (sizes the per-slot state).
  std::uint32_t max_batch = 64;
  // Graph engines' buckets; empty: the program runs on the dynamic-parallelism
  // engine only.
  std::vector<std::uint32_t> buckets;
};

// The program owns its device state (shared by copies of the StepProgram).
// InvalidArgument for options out of range.
[[nodiscard]] absl::StatusOr<StepProgram> SyntheticStepProgram(const SyntheticStepOptions& options);

}  // namespace baton
