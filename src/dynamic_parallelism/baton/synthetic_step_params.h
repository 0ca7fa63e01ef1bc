// The synthetic device step program's parameters and its value chain, shared
// by the step kernels (graph and dynamic-parallelism copies) and by host
// references. Abseil-free.
//
// Each step runs K kernels in order; kernel k folds (k, the item's step) into
// a per-item accumulator, so the value an item finishes with proves that every
// kernel of every step ran once and in order.
#pragma once

#include <cstdint>

#include "baton/config.h"

namespace baton {

// Kernels per synthetic step. Above 2047 the dynamic-parallelism engine
// passes the device runtime's default pending-launch limit (2048,
// cudaLimitDevRuntimePendingLaunchCount) on purpose (tests use that).
inline constexpr std::uint32_t kMaxSyntheticKernels = 4096;
inline constexpr std::uint32_t kSyntheticThreads = 128;  // threads per block of each kernel

struct SyntheticStepParams {
  std::uint32_t kernels = 0;              // K
  std::uint32_t capacity = 0;             // slots the accumulators cover
  std::uint32_t* accumulators = nullptr;  // device [capacity], indexed by the item's slot
};

[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t SyntheticSeed(std::uint32_t id) {
  return id * 0x9e3779b9u + 0x7f4a7c15u;
}

// Kernel `kernel` of the item's step `step` (0-based).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t SyntheticMix(std::uint32_t value,
                                                                     std::uint32_t kernel,
                                                                     std::uint32_t step) {
  value ^= (kernel + 1u) * 0x85ebca6bu + step * 0xc2b2ae35u;
  value *= 0x27d4eb2fu;
  return value ^ (value >> 15);
}

// Steps an item runs: its payload, at least one.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t SyntheticSteps(std::uint64_t payload) {
  return payload == 0 ? 1u : payload > 0xffffffffull ? 0xffffffffu : std::uint32_t(payload);
}

// The Completion::value an item (id, payload) finishes with: a host reference.
[[nodiscard]] inline std::uint32_t SyntheticExpectedValue(std::uint32_t id, std::uint64_t payload,
                                                          std::uint32_t kernels) {
  std::uint32_t value = SyntheticSeed(id);
  const std::uint32_t steps = SyntheticSteps(payload);
  for (std::uint32_t s = 0; s < steps; ++s) {
    for (std::uint32_t k = 0; k < kernels; ++k) value = SyntheticMix(value, k, s);
  }
  return value;
}

}  // namespace baton
