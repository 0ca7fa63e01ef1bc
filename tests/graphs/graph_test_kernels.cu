#include "baton/conditional_device.cuh"
#include "baton/device_launch.cuh"
#include "graph_test_kernels.h"

namespace baton::test {
namespace {

__global__ void pattern(std::uint32_t* out, int n, std::uint32_t seed) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = GraphPattern(seed, static_cast<std::uint32_t>(i));
}

__global__ void write_word(std::uint32_t* out, std::uint32_t value) { *out = value; }

__global__ void decide_loop(const std::uint32_t* data, std::uint32_t* state,
                            cudaGraphConditionalHandle handle) {
  state[0] = WhileCount(*data);
  state[1] = 0;
  set_condition(handle, state[0] > 0);
}

__global__ void loop_step(std::uint32_t* state, std::uint32_t* out,
                          cudaGraphConditionalHandle handle) {
  const std::uint32_t iteration = state[1];
  out[iteration] = 1000 + iteration;
  state[1] = iteration + 1;
  state[0] -= 1;
  set_condition(handle, state[0] > 0);
}

__global__ void bucket_scheduler(DeviceBucketTable table, const std::uint32_t* batch,
                                 std::uint32_t* chosen, std::uint32_t* error_word) {
  const int index = table.choose(*batch);
  *chosen = index < 0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(index);
  if (index >= 0) (void)tail_launch(table.entries[index].exec, error_word);
}

__global__ void tail_launch_once(cudaGraphExec_t exec, std::uint32_t* error_word) {
  (void)tail_launch(exec, error_word);
}

}  // namespace

cudaError_t EnqueuePattern(std::uint32_t* out, int n, std::uint32_t seed, cudaStream_t stream) {
  constexpr int kThreads = 256;
  pattern<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out, n, seed);
  return cudaGetLastError();
}

cudaError_t EnqueueWriteWord(std::uint32_t* out, std::uint32_t value, cudaStream_t stream) {
  write_word<<<1, 1, 0, stream>>>(out, value);
  return cudaGetLastError();
}

cudaError_t EnqueueDecideLoop(const std::uint32_t* data, std::uint32_t* state,
                              cudaGraphConditionalHandle handle, cudaStream_t stream) {
  decide_loop<<<1, 1, 0, stream>>>(data, state, handle);
  return cudaGetLastError();
}

cudaError_t EnqueueLoopStep(std::uint32_t* state, std::uint32_t* out,
                            cudaGraphConditionalHandle handle, cudaStream_t stream) {
  loop_step<<<1, 1, 0, stream>>>(state, out, handle);
  return cudaGetLastError();
}

cudaError_t EnqueueBucketScheduler(DeviceBucketTable table, const std::uint32_t* batch,
                                   std::uint32_t* chosen, std::uint32_t* error_word,
                                   cudaStream_t stream) {
  bucket_scheduler<<<1, 1, 0, stream>>>(table, batch, chosen, error_word);
  return cudaGetLastError();
}

cudaError_t EnqueueTailLaunch(cudaGraphExec_t exec, std::uint32_t* error_word,
                              cudaStream_t stream) {
  tail_launch_once<<<1, 1, 0, stream>>>(exec, error_word);
  return cudaGetLastError();
}

}  // namespace baton::test
