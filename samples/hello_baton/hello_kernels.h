// Kernels of the hello_baton sample behind a plain C++ interface (the sample's
// main uses Abseil, which stays out of .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace baton::samples {

// One decode-like step: bumps state[0] (steps done) and folds the step index
// into state[1] (a checksum the host recomputes).
[[nodiscard]] cudaError_t EnqueueCountStep(std::uint32_t* state, cudaStream_t stream);

// The device's decision: stop once state[0] reaches `target`, otherwise tail-
// launch `step` and then this scheduler's own graph again.
[[nodiscard]] cudaError_t EnqueueStopOrContinue(cudaGraphExec_t step, std::uint32_t* state,
                                                std::uint32_t target, std::uint32_t* error_word,
                                                cudaStream_t stream);

// The checksum state[1] holds after `steps` steps from zero.
[[nodiscard]] constexpr std::uint32_t ExpectedChecksum(std::uint32_t steps) {
  std::uint32_t sum = 0;
  for (std::uint32_t i = 0; i < steps; ++i) sum = sum * 31u + (i ^ 0x9e3779b9u);
  return sum;
}

}  // namespace baton::samples
