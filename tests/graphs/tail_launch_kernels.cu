#include <cuda/atomic>

#include "baton/device_launch.cuh"
#include "tail_launch_kernels.h"

namespace baton::test {
namespace {

__global__ void write_pattern(std::uint32_t* out, int n, std::uint32_t seed,
                              std::uint32_t* step_count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = PatternValue(seed, static_cast<std::uint32_t>(i));
  if (i == 0) {
    cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(*step_count)
        .fetch_add(1, cuda::std::memory_order_relaxed);
  }
}

__global__ void schedule_loop(cudaGraphExec_t step, std::uint32_t* remaining,
                              std::uint32_t* error_word) {
  if (*remaining == 0) return;
  *remaining -= 1;
  if (!tail_launch(step, error_word)) return;
  // The relaunch runs after the step (tail launches run in order), so the next
  // decision sees this step's results.
  (void)tail_launch(cudaGetCurrentGraphExec(), error_word);
}

}  // namespace

cudaError_t EnqueueWritePattern(std::uint32_t* out, int n, std::uint32_t seed,
                                std::uint32_t* step_count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  write_pattern<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out, n, seed, step_count);
  return cudaGetLastError();
}

cudaError_t EnqueueScheduleLoop(cudaGraphExec_t step, std::uint32_t* remaining,
                                std::uint32_t* error_word, cudaStream_t stream) {
  schedule_loop<<<1, 1, 0, stream>>>(step, remaining, error_word);
  return cudaGetLastError();
}

}  // namespace baton::test
