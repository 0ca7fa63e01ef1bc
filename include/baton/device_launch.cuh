// Device-side graph launches with the failure recorded, never ignored.
//
// Measured on CUDA 13.0 (docs/cuda-facts.md, G2 and G4): device cudaGraphLaunch works
// only from a kernel that itself runs inside a graph, and exceeding the pending
// launch limits returns cudaErrorInvalidValue at once. A scheduler must then
// stop and let the host see why, so every launch goes through these helpers.
#pragma once

#include <cuda_runtime.h>

#include "baton/device_error_word.h"

namespace baton {

// Tail-launches `exec` (a graph instantiated for device launch): it runs after
// the calling graph finishes. Returns false (and records why) on failure.
[[nodiscard]] __device__ inline bool tail_launch(cudaGraphExec_t exec, std::uint32_t* error_word) {
  const cudaError_t error = cudaGraphLaunch(exec, cudaStreamGraphTailLaunch);
  if (error != cudaSuccess) {
    record_device_error(error_word, DeviceErrorSite::kTailLaunch,
                        static_cast<std::uint32_t>(error));
    return false;
  }
  return true;
}

// Fire-and-forget launch: runs concurrently as a child of the calling graph.
[[nodiscard]] __device__ inline bool fire_and_forget_launch(cudaGraphExec_t exec,
                                                            std::uint32_t* error_word) {
  const cudaError_t error = cudaGraphLaunch(exec, cudaStreamGraphFireAndForget);
  if (error != cudaSuccess) {
    record_device_error(error_word, DeviceErrorSite::kFireAndForget,
                        static_cast<std::uint32_t>(error));
    return false;
  }
  return true;
}

}  // namespace baton
