#include <cuda/atomic>

#include "baton/work_queue.cuh"
#include "work_queue_test_kernels.h"

namespace baton::test {
namespace {

using Counter64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;
using Counter32 = cuda::atomic_ref<unsigned, cuda::thread_scope_device>;
constexpr unsigned kFull = 0xffffffffu;

__device__ void bump(unsigned long long* stats, int word) {
  Counter64(stats[word]).fetch_add(1, cuda::std::memory_order_relaxed);
}

// Checks one popped item against the multiset of pushed items.
__device__ void deliver(const ContentionArgs& a, const WorkItem& item) {
  if (!item.is_valid()) {
    if (item.is_terminate()) bump(a.stats, kUnexpected);
    return;
  }
  if (item.id >= a.total_items) {
    bump(a.stats, kPhantom);
    return;
  }
  const WorkItem expected = TestItem(item.id);
  if (item.kind != expected.kind || item.payload != expected.payload) bump(a.stats, kCorrupted);
  Counter32(a.deliveries[item.id]).fetch_add(1, cuda::std::memory_order_relaxed);
}

template <int N>
__device__ void deliver_all(const ContentionArgs& a, const LaneItems<N>& got) {
#pragma unroll
  for (int j = 0; j < N; ++j) deliver(a, got.item[j]);
}

// Pops once with the mode; returns the group's claimed count (uniform in the
// warp, or in the block for kBlock8).
template <PopMode Mode>
__device__ unsigned pop_and_deliver(const ContentionArgs& a, BlockPopStorage& storage) {
  if constexpr (Mode == PopMode::kSingle) {
    const WorkItem item = pop_single(a.queue);
    deliver(a, item);
    return static_cast<unsigned>(__popc(__ballot_sync(kFull, item.is_valid())));
  } else if constexpr (Mode == PopMode::kWarp1) {
    const auto got = pop_warp_batch<1>(a.queue, a.batch);
    deliver_all(a, got);
    return got.claimed;
  } else if constexpr (Mode == PopMode::kWarp2) {
    const auto got = pop_warp_batch<2>(a.queue, a.batch);
    deliver_all(a, got);
    return got.claimed;
  } else if constexpr (Mode == PopMode::kWarp8) {
    const auto got = pop_warp_batch<8>(a.queue, a.batch);
    deliver_all(a, got);
    return got.claimed;
  } else {
    const auto got = pop_block_batch<8>(a.queue, a.batch, storage);
    deliver_all(a, got);
    return got.claimed;
  }
}

template <PopMode Mode>
__global__ void __launch_bounds__(kContentionThreads, 8) produce_consume(ContentionArgs a) {
  __shared__ BlockPopStorage storage;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned long long warp =
      (blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x) / 32;
  const unsigned long long warps = gridDim.x * static_cast<unsigned long long>(blockDim.x) / 32;
  const unsigned long long share = (a.total_items + warps - 1) / warps;
  const unsigned long long begin = warp * share < a.total_items ? warp * share : a.total_items;
  const unsigned long long end = begin + share < a.total_items ? begin + share : a.total_items;
  const unsigned push_rounds = a.batch > 32 ? (a.batch + 31) / 32 : 1;
  unsigned long long next = begin;
  const std::uint64_t started = cuda::ptx::get_sreg_globaltimer();
  for (;;) {
    for (unsigned r = 0; r < push_rounds && next < end; ++r) {
      const unsigned long long id = next + lane;
      const bool has = id < end && lane < a.batch;
      const bool ok = push_warp_aggregated(a.queue, TestItem(static_cast<std::uint32_t>(id)), has);
      const unsigned accepted = static_cast<unsigned>(__popc(__ballot_sync(kFull, ok)));
      next += accepted;
      if (accepted < static_cast<unsigned>(__popc(__ballot_sync(kFull, has)))) break;
    }
    const unsigned claimed = pop_and_deliver<Mode>(a, storage);
    const bool group_leader = Mode == PopMode::kBlock8 ? threadIdx.x == 0 : lane == 0;
    if (group_leader && claimed > 0) {
      Counter64(*a.consumed).fetch_add(claimed, cuda::std::memory_order_relaxed);
    }
    bool done = next == end &&
                Counter64(*a.consumed).load(cuda::std::memory_order_relaxed) >= a.total_items;
    bool out_of_time = cuda::ptx::get_sreg_globaltimer() - started > a.budget_ns;
    if (Mode == PopMode::kBlock8) {
      done = __syncthreads_and(done) != 0;
      out_of_time = __syncthreads_or(out_of_time) != 0;
    } else {
      done = __all_sync(kFull, done);
      out_of_time = __any_sync(kFull, out_of_time);
    }
    if (done) return;
    if (out_of_time) {
      if (lane == 0) bump(a.stats, kOutOfTime);
      return;
    }
    if (claimed == 0) __nanosleep(200);
  }
}

__global__ void consume_until_terminate(ContentionArgs a) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t started = cuda::ptx::get_sreg_globaltimer();
  while (!__any_sync(kFull, cuda::ptx::get_sreg_globaltimer() - started > a.budget_ns)) {
    const auto got = pop_warp_batch<1>(a.queue, a.batch);
    if (got.terminated()) {
      if (lane == 0) bump(a.stats, kTerminated);
      return;
    }
    deliver(a, got.item[0]);
    if (got.claimed == 0) __nanosleep(500);
  }
  if (lane == 0) bump(a.stats, kOutOfTime);
}

__global__ void count_deliveries(const unsigned* deliveries, std::uint64_t n,
                                 unsigned long long* out) {
  unsigned lost = 0;
  unsigned extra = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const unsigned c = deliveries[i];
    lost += c == 0 ? 1u : 0u;
    extra += c > 1 ? c - 1 : 0u;
  }
  lost = __reduce_add_sync(kFull, lost);
  extra = __reduce_add_sync(kFull, extra);
  if ((threadIdx.x & 31u) == 0) {
    Counter64(out[0]).fetch_add(lost, cuda::std::memory_order_relaxed);
    Counter64(out[1]).fetch_add(extra, cuda::std::memory_order_relaxed);
  }
}

__global__ void lane_exit_pops(WorkQueueView q, const unsigned* exit_round, unsigned max_items,
                               unsigned rounds, WorkItem* out, unsigned* active_masks) {
  const unsigned lane = threadIdx.x;
  for (unsigned r = 0; r < rounds; ++r) {
    if (r >= exit_round[lane]) return;  // this lane is done: the others go on without it
    unsigned expected = 0;
    for (unsigned l = 0; l < 32; ++l) expected |= (exit_round[l] > r ? 1u : 0u) << l;
    __syncwarp(expected);
    const unsigned seen = __activemask();
    const auto got = pop_warp_batch<2>(q, max_items);
    if (lane == static_cast<unsigned>(__ffs(expected) - 1)) active_masks[r] = seen;
    out[(r * 32 + lane) * 2 + 0] = got.item[0];
    out[(r * 32 + lane) * 2 + 1] = got.item[1];
  }
}

__global__ void pop_single_kernel(WorkQueueView q, WorkItem* out, unsigned count) {
  for (unsigned i = 0; i < count; ++i) out[i] = pop_single(q);
}

__global__ void device_push(WorkQueueView q, unsigned count, unsigned* accepted) {
  for (unsigned base = 0; base < count; base += blockDim.x) {
    const unsigned id = base + threadIdx.x;
    const bool ok = push_warp_aggregated(q, TestItem(id), id < count);
    if (id < count) accepted[id] = ok ? 1u : 0u;
  }
}

__global__ void abandon_ticket(WorkQueueView q) {
  const queue_detail::Claim claim = queue_detail::claim_push(q, 1);
  if (claim.count == 1) queue_detail::publish_items(q, 1);  // counted, never written
}

}  // namespace

cudaError_t EnqueueProduceConsume(const ContentionArgs& args, int blocks, cudaStream_t stream) {
  switch (args.mode) {
    case PopMode::kSingle:
      produce_consume<PopMode::kSingle><<<blocks, kContentionThreads, 0, stream>>>(args);
      break;
    case PopMode::kWarp1:
      produce_consume<PopMode::kWarp1><<<blocks, kContentionThreads, 0, stream>>>(args);
      break;
    case PopMode::kWarp2:
      produce_consume<PopMode::kWarp2><<<blocks, kContentionThreads, 0, stream>>>(args);
      break;
    case PopMode::kWarp8:
      produce_consume<PopMode::kWarp8><<<blocks, kContentionThreads, 0, stream>>>(args);
      break;
    case PopMode::kBlock8:
      produce_consume<PopMode::kBlock8><<<blocks, kContentionThreads, 0, stream>>>(args);
      break;
  }
  return cudaGetLastError();
}

cudaError_t ProduceConsumeBlocksPerSm(PopMode mode, int* blocks) {
  switch (mode) {
    case PopMode::kSingle:
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          blocks, produce_consume<PopMode::kSingle>, kContentionThreads, 0);
    case PopMode::kWarp1:
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, produce_consume<PopMode::kWarp1>,
                                                           kContentionThreads, 0);
    case PopMode::kWarp2:
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, produce_consume<PopMode::kWarp2>,
                                                           kContentionThreads, 0);
    case PopMode::kWarp8:
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, produce_consume<PopMode::kWarp8>,
                                                           kContentionThreads, 0);
    case PopMode::kBlock8:
      return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          blocks, produce_consume<PopMode::kBlock8>, kContentionThreads, 0);
  }
  return cudaErrorInvalidValue;
}

cudaError_t EnqueueConsumeUntilTerminate(const ContentionArgs& args, int blocks,
                                         cudaStream_t stream) {
  consume_until_terminate<<<blocks, kContentionThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

cudaError_t EnqueueCountDeliveries(const unsigned* deliveries, std::uint64_t n,
                                   unsigned long long* out, cudaStream_t stream) {
  count_deliveries<<<1024, 256, 0, stream>>>(deliveries, n, out);
  return cudaGetLastError();
}

cudaError_t EnqueueLaneExitPops(WorkQueueView queue, const unsigned* exit_round, unsigned max_items,
                                unsigned rounds, WorkItem* out, unsigned* active_masks,
                                cudaStream_t stream) {
  lane_exit_pops<<<1, 32, 0, stream>>>(queue, exit_round, max_items, rounds, out, active_masks);
  return cudaGetLastError();
}

cudaError_t EnqueuePopSingle(WorkQueueView queue, WorkItem* out, unsigned count,
                             cudaStream_t stream) {
  pop_single_kernel<<<1, 1, 0, stream>>>(queue, out, count);
  return cudaGetLastError();
}

cudaError_t EnqueueDevicePush(WorkQueueView queue, unsigned count, unsigned* accepted,
                              cudaStream_t stream) {
  device_push<<<1, 256, 0, stream>>>(queue, count, accepted);
  return cudaGetLastError();
}

cudaError_t EnqueueAbandonTicket(WorkQueueView queue, cudaStream_t stream) {
  abandon_ticket<<<1, 1, 0, stream>>>(queue);
  return cudaGetLastError();
}

}  // namespace baton::test
