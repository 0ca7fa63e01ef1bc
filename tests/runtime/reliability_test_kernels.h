// Step kernels that misbehave on purpose, for the watchdog and fault tests,
// behind a plain C++ interface. Each is armed through a gate word in mapped
// host memory, so the host decides when the misbehaviour starts and sees when
// it did: 0 idle, 1 armed, 2 started, 3 finished (stall only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace baton::test {

enum class Fault : std::uint32_t {
  kTrap = 0,              // __trap(): cudaErrorLaunchFailure, the context is lost
  kOutOfBoundsWrite = 1,  // a store to an unmapped address: cudaErrorIllegalAddress
};

inline constexpr std::uint32_t kGateIdle = 0;
inline constexpr std::uint32_t kGateArmed = 1;
inline constexpr std::uint32_t kGateStarted = 2;
inline constexpr std::uint32_t kGateFinished = 3;

// Once armed, the next run spins on the GPU's global timer for `stall_ns`
// (bounded: the GPU is never hung for good), then the gate reads finished.
[[nodiscard]] cudaError_t EnqueueStallOnce(std::uint32_t* gate, unsigned long long stall_ns,
                                           cudaStream_t stream);

// Once armed, the next run faults the way `fault` says, after "started" is
// visible to the host. `unmapped` is the address the out-of-bounds write goes
// to.
[[nodiscard]] cudaError_t EnqueueFaultOnce(std::uint32_t* gate, Fault fault,
                                           std::uint32_t* unmapped, cudaStream_t stream);

}  // namespace baton::test
