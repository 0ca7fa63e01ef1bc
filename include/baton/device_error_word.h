// The device error word: device code cannot return a Status, so the first
// device-side failure of a run (a refused device launch, a bounded wait that
// ran out) is packed into one 32-bit word the host reads back. Host- and
// device-usable; no Abseil, so .cu files may include it.
#pragma once

#include <cstdint>

#include "baton/config.h"

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

namespace baton {

// Where on the device an error happened; the host names it in the Status.
enum class DeviceErrorSite : std::uint32_t {
  kNone = 0,
  kTailLaunch = 1,      // cudaGraphLaunch(..., cudaStreamGraphTailLaunch)
  kFireAndForget = 2,   // cudaGraphLaunch(..., cudaStreamGraphFireAndForget)
  kKernelLaunch = 3,    // dynamic-parallelism kernel launch
  kQueueWait = 4,       // a bounded wait on a queue slot ran out
  kSchedulerState = 5,  // scheduler found its own state inconsistent
  kLockstep = 6,        // tensor-parallel lockstep: code = the rank that faulted or lagged
};

// Packs (site, code) as site << 16 | code. 0 means "no error".
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t PackDeviceError(DeviceErrorSite site,
                                                                        std::uint32_t code) {
  return (static_cast<std::uint32_t>(site) << 16) | (code & 0xffffu);
}
[[nodiscard]] BATON_HOST_DEVICE constexpr DeviceErrorSite DeviceErrorSiteOf(std::uint32_t word) {
  return static_cast<DeviceErrorSite>(word >> 16);
}
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t DeviceErrorCodeOf(std::uint32_t word) {
  return word & 0xffffu;
}

#if defined(__CUDACC__)
// Records the first error of a run; later errors never overwrite it.
__device__ inline void record_device_error(std::uint32_t* error_word, DeviceErrorSite site,
                                           std::uint32_t code) {
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system> word(*error_word);
  std::uint32_t expected = 0;
  (void)word.compare_exchange_strong(expected, PackDeviceError(site, code),
                                     cuda::std::memory_order_relaxed);
}
#endif

}  // namespace baton
