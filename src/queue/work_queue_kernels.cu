#include "baton/work_queue.cuh"
#include "work_queue_kernels.h"

namespace baton::queue_kernels {
namespace {

constexpr int kThreads = 256;
// One small block: it must find room next to a consumer grid that leaves only
// a few block slots free (a 1024-thread block may need a whole SM's registers).
constexpr int kSeedThreads = 256;
constexpr int kDrainItemsPerThread = 4;

__global__ void initialize_sequences(WorkQueueView view, unsigned long long first_ticket) {
  const unsigned long long capacity = view.capacity();
  for (unsigned long long i =
           blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
       i < capacity; i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const unsigned long long ticket = first_ticket + i;
    view.sequence[ticket & view.mask] = ticket;
    view.slots[ticket & view.mask] = WorkItem::invalid();
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    view.counters->head = first_ticket;
    view.counters->tail = first_ticket;
    view.counters->items = 0;
    view.counters->free_slots = static_cast<long long>(capacity);
    view.counters->closed = 0;
    view.counters->error_word = 0;
  }
}

// Chunks keep the reservation small, so concurrent device producers never see
// the whole span's transient claim on free_slots.
__global__ void __launch_bounds__(kSeedThreads)
    seed(WorkQueueView view, const WorkItem* staged, std::uint64_t count, std::uint64_t* accepted) {
  __shared__ queue_detail::Claim claim;
  std::uint64_t done = 0;
  while (done < count) {
    const std::uint64_t left = count - done;
    const unsigned want = left < kSeedThreads * 8 ? static_cast<unsigned>(left) : kSeedThreads * 8;
    if (threadIdx.x == 0) claim = queue_detail::claim_push(view, want);
    __syncthreads();
    const queue_detail::Claim mine = claim;
    __syncthreads();
    if (mine.count == 0) break;
    for (unsigned i = threadIdx.x; i < mine.count; i += blockDim.x) {
      (void)queue_detail::put(view, mine.first + i, staged[done + i]);
    }
    __syncthreads();
    if (threadIdx.x == 0) queue_detail::publish_items(view, mine.count);
    done += mine.count;
    if (mine.count < want) break;
  }
  if (threadIdx.x == 0) *accepted = done;
}

__global__ void __launch_bounds__(kThreads)
    drain(WorkQueueView view, WorkItem* out, std::uint64_t out_capacity, std::uint64_t* drained) {
  __shared__ BlockPopStorage storage;
  std::uint64_t total = 0;
  while (total < out_capacity) {
    const std::uint64_t room = out_capacity - total;
    const unsigned want = room < kThreads * kDrainItemsPerThread ? static_cast<unsigned>(room)
                                                                 : kThreads * kDrainItemsPerThread;
    const LaneItems<kDrainItemsPerThread> got =
        pop_block_batch<kDrainItemsPerThread>(view, want, storage);
    if (got.claimed == 0) break;
#pragma unroll
    for (int j = 0; j < kDrainItemsPerThread; ++j) {
      const unsigned index = threadIdx.x + j * blockDim.x;
      if (index < got.claimed) out[total + index] = got.item[j];
    }
    total += got.claimed;
  }
  if (threadIdx.x == 0) *drained = total;
}

}  // namespace

cudaError_t PreloadKernels() {
  cudaFuncAttributes attributes;
  for (const void* kernel :
       {reinterpret_cast<const void*>(&initialize_sequences), reinterpret_cast<const void*>(&seed),
        reinterpret_cast<const void*>(&drain)}) {
    const cudaError_t error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

cudaError_t EnqueueInitialize(const WorkQueueView& view, unsigned long long first_ticket,
                              cudaStream_t stream) {
  const unsigned long long blocks = (view.capacity() + kThreads - 1) / kThreads;
  initialize_sequences<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0,
                         stream>>>(view, first_ticket);
  return cudaGetLastError();
}

cudaError_t EnqueueSeed(const WorkQueueView& view, const WorkItem* staged, std::uint64_t count,
                        std::uint64_t* accepted, cudaStream_t stream) {
  seed<<<1, kSeedThreads, 0, stream>>>(view, staged, count, accepted);
  return cudaGetLastError();
}

cudaError_t EnqueueDrain(const WorkQueueView& view, WorkItem* out, std::uint64_t out_capacity,
                         std::uint64_t* drained, cudaStream_t stream) {
  drain<<<1, kThreads, 0, stream>>>(view, out, out_capacity, drained);
  return cudaGetLastError();
}

}  // namespace baton::queue_kernels
