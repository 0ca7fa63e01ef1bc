// Dynamic parallelism: compiled with -rdc (see samples/CMakeLists.txt), the
// only separately compiled code in the sample.
#include "baton/device_launch.cuh"
#include "launch_comparison/step_kernels.cuh"

namespace baton::samples {
namespace {

__global__ void dp_scheduler(LoopState* state, int kernels) {
  if (state->steps_done >= state->target) return;
  // Tail-stream launches run after this kernel, in order: the step's kernels,
  // then the next decision.
  for (int k = 0; k < kernels; ++k) {
    tiny_step_kernel<<<1, 32, 0, cudaStreamTailLaunch>>>(state, k, k == kernels - 1);
  }
  dp_scheduler<<<1, 1, 0, cudaStreamTailLaunch>>>(state, kernels);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    record_device_error(&state->error_word, DeviceErrorSite::kKernelLaunch,
                        static_cast<std::uint32_t>(error));
  }
}

}  // namespace

cudaError_t LaunchDynamicParallelismLoop(LoopState* state, int kernels, cudaStream_t stream) {
  dp_scheduler<<<1, 1, 0, stream>>>(state, kernels);
  return cudaGetLastError();
}

}  // namespace baton::samples
