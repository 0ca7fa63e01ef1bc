#include "baton/device_launch.cuh"
#include "dp_floor.h"

namespace baton::detail {
namespace {

__global__ void dp_floor_step_kernel(DpFloorLoop loop, int kernel, int last) {
  if (threadIdx.x != 0) return;
  loop.values[kernel] = loop.values[kernel] * 3u + static_cast<std::uint32_t>(kernel + 1);
  if (last) *loop.steps_done += 1;
}

__global__ void dp_floor_scheduler(DpFloorLoop loop, int kernels) {
  if (*loop.steps_done >= *loop.target) return;
  // Tail-stream launches run after this kernel, in order: the step's kernels,
  // then the next decision.
  for (int k = 0; k < kernels; ++k) {
    dp_floor_step_kernel<<<1, 32, 0, cudaStreamTailLaunch>>>(loop, k, k == kernels - 1);
  }
  dp_floor_scheduler<<<1, 1, 0, cudaStreamTailLaunch>>>(loop, kernels);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    record_device_error(loop.error_word, DeviceErrorSite::kKernelLaunch,
                        static_cast<std::uint32_t>(error));
  }
}

}  // namespace

cudaError_t LaunchDynamicParallelismFloor(const DpFloorLoop& loop, int kernels,
                                          cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(1);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, dp_floor_scheduler, loop, kernels);
}

}  // namespace baton::detail
