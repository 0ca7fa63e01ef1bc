#include "baton/device_launch.cuh"
#include "hello_baton/hello_kernels.h"

namespace baton::samples {
namespace {

__global__ void count_step(std::uint32_t* state) {
  const std::uint32_t step = state[0];
  state[1] = state[1] * 31u + (step ^ 0x9e3779b9u);
  state[0] = step + 1;
}

__global__ void stop_or_continue(cudaGraphExec_t step, const std::uint32_t* state,
                                 std::uint32_t target, std::uint32_t* error_word) {
  if (state[0] >= target) return;  // decided on the device: no host round trip
  if (!tail_launch(step, error_word)) return;
  (void)tail_launch(cudaGetCurrentGraphExec(), error_word);
}

}  // namespace

cudaError_t EnqueueCountStep(std::uint32_t* state, cudaStream_t stream) {
  count_step<<<1, 1, 0, stream>>>(state);
  return cudaGetLastError();
}

cudaError_t EnqueueStopOrContinue(cudaGraphExec_t step, std::uint32_t* state, std::uint32_t target,
                                  std::uint32_t* error_word, cudaStream_t stream) {
  stop_or_continue<<<1, 1, 0, stream>>>(step, state, target, error_word);
  return cudaGetLastError();
}

}  // namespace baton::samples
