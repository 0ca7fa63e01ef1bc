// The bare dynamic-parallelism mechanism with no scheduler decision: a
// one-thread kernel tail-launches K one-thread kernels and then itself until
// a device counter reaches a target. launch_comparison times it as the floor
// of the dynamic-parallelism engine. It lives in baton_dp because one
// executable can hold only one device link that contains cudadevrt: with a
// second one (even in a shared library) the DP engine's host launch failed
// with cudaErrorInvalidResourceHandle on an H200. Internal; Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace baton::detail {

// Device pointers.
struct DpFloorLoop {
  std::uint32_t* steps_done = nullptr;  // bumped by the last kernel of every step
  const std::uint32_t* target = nullptr;
  std::uint32_t* values = nullptr;      // kernel k: values[k] = values[k] * 3 + (k + 1)
  std::uint32_t* error_word = nullptr;  // first refused launch (baton/device_error_word.h)
};

[[nodiscard]] cudaError_t LaunchDynamicParallelismFloor(const DpFloorLoop& loop, int kernels,
                                                        cudaStream_t stream);

}  // namespace baton::detail
