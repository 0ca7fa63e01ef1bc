// Kernels for tail_launch_gpu_test, behind a plain C++ interface so the test
// itself (which uses Abseil) stays a .cc file.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"

namespace baton::test {

// The value write_pattern stores at index i; the host recomputes it.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t PatternValue(std::uint32_t seed,
                                                                     std::uint32_t i) {
  return (i * 2654435761u) ^ seed;
}

// Enqueues the step kernel: out[i] = PatternValue(seed, i) for i < n, and
// increments *step_count once per run.
[[nodiscard]] cudaError_t EnqueueWritePattern(std::uint32_t* out, int n, std::uint32_t seed,
                                              std::uint32_t* step_count, cudaStream_t stream);

// Enqueues the 1-thread scheduler: while *remaining > 0 it decrements it,
// tail-launches `step` and then tail-launches its own graph. Device launch
// failures land in *error_word.
[[nodiscard]] cudaError_t EnqueueScheduleLoop(cudaGraphExec_t step, std::uint32_t* remaining,
                                              std::uint32_t* error_word, cudaStream_t stream);

}  // namespace baton::test
