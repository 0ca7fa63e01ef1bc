// Kernels for the graph toolkit GPU tests, behind a plain C++ interface so the
// tests themselves (which use Abseil) stay .cc files.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/bucket_entry.h"
#include "baton/config.h"

namespace baton::test {

[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t GraphPattern(std::uint32_t seed,
                                                                     std::uint32_t i) {
  return (i * 2246822519u + 374761393u) ^ seed;
}

// The loop count a WHILE test's device decides from data: 1 + data % 23.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t WhileCount(std::uint32_t data) {
  return 1 + data % 23;
}

// out[i] = GraphPattern(seed, i) for i < n.
[[nodiscard]] cudaError_t EnqueuePattern(std::uint32_t* out, int n, std::uint32_t seed,
                                         cudaStream_t stream);
// *out = value.
[[nodiscard]] cudaError_t EnqueueWriteWord(std::uint32_t* out, std::uint32_t value,
                                           cudaStream_t stream);
// state[0] (remaining) = WhileCount(*data), state[1] (iterations) = 0; sets
// `handle` to remaining > 0.
[[nodiscard]] cudaError_t EnqueueDecideLoop(const std::uint32_t* data, std::uint32_t* state,
                                            cudaGraphConditionalHandle handle, cudaStream_t stream);
// One WHILE iteration: out[state[1]] = 1000 + state[1]; ++state[1];
// --state[0]; handle = state[0] > 0.
[[nodiscard]] cudaError_t EnqueueLoopStep(std::uint32_t* state, std::uint32_t* out,
                                          cudaGraphConditionalHandle handle, cudaStream_t stream);
// A 1-thread scheduler: *chosen = table.choose(*batch) (0xFFFFFFFF when none)
// and tail-launches that bucket's graph. Must run inside a graph.
[[nodiscard]] cudaError_t EnqueueBucketScheduler(DeviceBucketTable table,
                                                 const std::uint32_t* batch, std::uint32_t* chosen,
                                                 std::uint32_t* error_word, cudaStream_t stream);
// A 1-thread kernel that tail-launches `exec`. Must run inside a graph.
[[nodiscard]] cudaError_t EnqueueTailLaunch(cudaGraphExec_t exec, std::uint32_t* error_word,
                                            cudaStream_t stream);

}  // namespace baton::test
