// The synthetic step's dynamic-parallelism copy: the same body as the graph
// copy (synthetic_step_body.cuh), launched from the device scheduler.
#include "dp_step_launch.cuh"
#include "synthetic_step_body.cuh"

namespace baton::detail {
namespace {

__global__ void __launch_bounds__(kSyntheticThreads)
    dp_synthetic_step_kernel(StepArgs args, SyntheticStepParams params, std::uint32_t kernel) {
  synthetic_step_body(args, params, kernel);
}

}  // namespace

__device__ DeviceStepLaunch launch_synthetic_step(const StepArgs& args, const void* params,
                                                  std::uint32_t batch) {
  const SyntheticStepParams p = *static_cast<const SyntheticStepParams*>(params);
  // The grid covers the actual batch, not a bucket.
  const unsigned blocks = (batch + kSyntheticThreads - 1) / kSyntheticThreads;
  DeviceStepLaunch launch;
  for (std::uint32_t k = 0; k < p.kernels; ++k) {
    dp_synthetic_step_kernel<<<blocks, kSyntheticThreads, 0, cudaStreamTailLaunch>>>(args, p, k);
    launch.error = cudaGetLastError();
    if (launch.error != cudaSuccess) return launch;
    launch.launches += 1;
  }
  return launch;
}

}  // namespace baton::detail
