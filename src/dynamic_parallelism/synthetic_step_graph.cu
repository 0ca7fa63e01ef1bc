#include "baton/step_launch.cuh"
#include "synthetic_step_body.cuh"
#include "synthetic_step_launch.h"

namespace baton::detail {
namespace {

__global__ void __launch_bounds__(kSyntheticThreads)
    synthetic_step_kernel(StepArgs args, SyntheticStepParams params, std::uint32_t kernel) {
  // Launched with launch_step_kernel: the previous node may still run.
  wait_for_previous_nodes();
  synthetic_step_body(args, params, kernel);
}

}  // namespace

cudaError_t EnqueueSyntheticStep(const StepArgs& args, const SyntheticStepParams& params,
                                 std::uint32_t bucket_size, cudaStream_t stream) {
  const unsigned blocks = (bucket_size + kSyntheticThreads - 1) / kSyntheticThreads;
  for (std::uint32_t k = 0; k < params.kernels; ++k) {
    const cudaError_t error = launch_step_kernel(
        synthetic_step_kernel, dim3(blocks), dim3(kSyntheticThreads), 0, stream, args, params, k);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace baton::detail
