#include <cuda/atomic>

#include "baton/step_kernel.cuh"
#include "runtime_test_kernels.h"

namespace baton::test {
namespace {

constexpr int kThreads = 128;

__global__ void countdown_step(StepArgs args, std::uint32_t* runs) {
  const std::uint32_t position = blockIdx.x * blockDim.x + threadIdx.x;
  if (position >= args.header->batch) return;
  const WorkItem item = args.items[position];
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(runs[item.id])
      .fetch_add(1, cuda::std::memory_order_relaxed);
  const std::uint32_t needed = static_cast<std::uint32_t>(item.payload);
  if (args.item_steps[position] + 1 >= needed) {
    finish_item(args, position, CountdownValue(item.id, needed));
  }
}

__global__ void countdown_remaining(StepArgs args, std::uint32_t* scratch) {
  allow_next_node();
  wait_for_previous_nodes();
  const std::uint32_t position = blockIdx.x * blockDim.x + threadIdx.x;
  if (position >= args.header->batch) return;
  const std::uint32_t needed = static_cast<std::uint32_t>(args.items[position].payload);
  scratch[args.slots[position]] = needed - args.item_steps[position] - 1;
}

__global__ void countdown_finish(StepArgs args, std::uint32_t* runs, const std::uint32_t* scratch) {
  wait_for_previous_nodes();
  const std::uint32_t position = blockIdx.x * blockDim.x + threadIdx.x;
  if (position >= args.header->batch) return;
  const WorkItem item = args.items[position];
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(runs[item.id])
      .fetch_add(1, cuda::std::memory_order_relaxed);
  if (scratch[args.slots[position]] == 0) {
    finish_item(args, position, CountdownValue(item.id, static_cast<std::uint32_t>(item.payload)));
  }
}

__global__ void self_launch_once(std::uint32_t* flag) {
  if (*flag != 0) return;
  *flag =
      cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch) == cudaSuccess ? 1 : 2;
}

}  // namespace

cudaError_t EnqueueTwoKernelCountdownStep(const StepArgs& args, std::uint32_t bucket_size,
                                          std::uint32_t* runs, std::uint32_t* scratch,
                                          cudaStream_t stream) {
  const dim3 blocks((bucket_size + kThreads - 1) / kThreads);
  const cudaError_t error =
      launch_step_kernel(countdown_remaining, blocks, dim3(kThreads), 0, stream, args, scratch);
  if (error != cudaSuccess) return error;
  return launch_step_kernel(countdown_finish, blocks, dim3(kThreads), 0, stream, args, runs,
                            static_cast<const std::uint32_t*>(scratch));
}

cudaError_t EnqueueSelfLaunchOnce(std::uint32_t* flag, cudaStream_t stream) {
  self_launch_once<<<1, 1, 0, stream>>>(flag);
  return cudaGetLastError();
}

cudaError_t EnqueueCountdownStep(const StepArgs& args, std::uint32_t bucket_size,
                                 std::uint32_t* runs, cudaStream_t stream) {
  const unsigned blocks = (bucket_size + kThreads - 1) / kThreads;
  countdown_step<<<blocks, kThreads, 0, stream>>>(args, runs);
  return cudaGetLastError();
}

}  // namespace baton::test
