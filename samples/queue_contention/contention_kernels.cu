#include <cuda/atomic>

#include "baton/work_queue.cuh"
#include "queue_contention/contention_kernels.h"

namespace baton::samples {
namespace {

using Counter64 = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;
constexpr unsigned kFull = 0xffffffffu;

__device__ int iterations(std::uint32_t id, Cost cost) {
  switch (cost) {
    case Cost::kNone:
      return 0;
    case Cost::kLight:
      return 32;
    case Cost::kUneven:
      return static_cast<int>(id % 256u);
    case Cost::kClustered:
      return (id / 4096u) % 16u == 0 ? 2048 : 8;
  }
  return 0;
}

__device__ float work(std::uint32_t id, Cost cost) {
  const int n = iterations(id, cost);
  float x = static_cast<float>(id & 0xffffu) * 1e-4f;
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    acc = fmaf(__sinf(x), __cosf(x), acc);
    x += 1e-3f;
  }
  return acc;
}

struct Tally {
  unsigned long long delivered = 0;
  unsigned long long phantom = 0;
  unsigned long long corrupted = 0;
  float sink = 0.0f;
};

__device__ void deliver(const ConsumeArgs& a, const WorkItem& item, Tally& t) {
  if (!item.is_valid()) return;
  if (item.id >= a.items) {
    ++t.phantom;
    return;
  }
  const WorkItem expected = SampleItem(item.id);
  if (item.kind != expected.kind || item.payload != expected.payload) ++t.corrupted;
  a.marks[item.id] = 1;
  ++t.delivered;
  const float r = work(item.id, a.cost);
  if (a.out != nullptr) {
    a.out[item.id] = r;
  } else {
    t.sink += r;
  }
}

__device__ void flush(const ConsumeArgs& a, Tally& t) {
  // One atomic per warp and word, after the timed loop's work is done.
  const unsigned mask = __activemask();
  const unsigned long long d = __reduce_add_sync(mask, static_cast<unsigned>(t.delivered));
  const unsigned long long p = __reduce_add_sync(mask, static_cast<unsigned>(t.phantom));
  const unsigned long long c = __reduce_add_sync(mask, static_cast<unsigned>(t.corrupted));
  if ((threadIdx.x & 31u) == static_cast<unsigned>(__ffs(mask) - 1)) {
    Counter64(a.stats[kDelivered]).fetch_add(d, cuda::std::memory_order_relaxed);
    if (p) Counter64(a.stats[kPhantom]).fetch_add(p, cuda::std::memory_order_relaxed);
    if (c) Counter64(a.stats[kCorrupted]).fetch_add(c, cuda::std::memory_order_relaxed);
  }
  // Keeps the work from being optimized away without writing per item.
  if (t.sink == 1234.5678f) a.stats[kSampleStats - 1] = 1;
}

template <int N>
__device__ bool warp_round(const ConsumeArgs& a, Tally& t) {
  const auto got = pop_warp_batch<N>(a.queue, 32 * N);
  if (got.claimed == 0) return false;
#pragma unroll
  for (int j = 0; j < N; ++j) deliver(a, got.item[j], t);
  return true;
}

template <int N>
__device__ bool block_round(const ConsumeArgs& a, Tally& t, BlockPopStorage& storage) {
  const auto got = pop_block_batch<N>(a.queue, kSampleThreads * N, storage);
  if (got.claimed == 0) return false;
#pragma unroll
  for (int j = 0; j < N; ++j) deliver(a, got.item[j], t);
  return true;
}

template <PopKind Kind>
__global__ void __launch_bounds__(kSampleThreads, 8) consume(ConsumeArgs a) {
  __shared__ BlockPopStorage storage;
  Tally t;
  for (;;) {
    bool more = false;
    if constexpr (Kind == PopKind::kSingle) {
      const WorkItem item = pop_single(a.queue);
      more = item.is_valid();
      deliver(a, item, t);
    } else if constexpr (Kind == PopKind::kWarp32) {
      more = warp_round<1>(a, t);
    } else if constexpr (Kind == PopKind::kWarp128) {
      more = warp_round<4>(a, t);
    } else if constexpr (Kind == PopKind::kWarp256) {
      more = warp_round<8>(a, t);
    } else if constexpr (Kind == PopKind::kBlock1024) {
      more = block_round<4>(a, t, storage);
    } else if constexpr (Kind == PopKind::kBlock2048) {
      more = block_round<8>(a, t, storage);
    } else {
      more = block_round<16>(a, t, storage);
    }
    if (!more) break;
  }
  flush(a, t);
}

__global__ void __launch_bounds__(kSampleThreads)
    fill(WorkQueueView q, std::uint64_t items, unsigned long long* stats) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warp =
      (blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const std::uint64_t warps = gridDim.x * static_cast<std::uint64_t>(blockDim.x) / 32;
  unsigned refused = 0;
  for (std::uint64_t base = warp * 32; base < items; base += warps * 32) {
    const std::uint64_t id = base + lane;
    bool pending = id < items;
    for (int tries = 0; tries < 1000 && __any_sync(kFull, pending); ++tries) {
      if (push_warp_aggregated(q, SampleItem(static_cast<std::uint32_t>(id)), pending)) {
        pending = false;
      }
    }
    refused += pending ? 1u : 0u;
  }
  refused = __reduce_add_sync(kFull, refused);
  if (lane == 0 && refused) {
    Counter64(stats[kRefused]).fetch_add(refused, cuda::std::memory_order_relaxed);
  }
}

__global__ void count_lost(const unsigned char* marks, std::uint64_t items,
                           unsigned long long* stats) {
  unsigned lost = 0;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < items; i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    lost += marks[i] == 0 ? 1u : 0u;
  }
  lost = __reduce_add_sync(kFull, lost);
  if ((threadIdx.x & 31u) == 0 && lost) {
    Counter64(stats[kLost]).fetch_add(lost, cuda::std::memory_order_relaxed);
  }
}

__global__ void static_one_per_item(Cost cost, std::uint64_t items, float* out) {
  const std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
  if (i < items) out[i] = work(static_cast<std::uint32_t>(i), cost);
}

__global__ void __launch_bounds__(kSampleThreads, 8)
    static_chunked(Cost cost, std::uint64_t items, float* out) {
  const unsigned lane = threadIdx.x & 31u;
  const std::uint64_t warp =
      (blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const std::uint64_t warps = gridDim.x * static_cast<std::uint64_t>(blockDim.x) / 32;
  const std::uint64_t chunk = (items + warps - 1) / warps;
  const std::uint64_t begin = warp * chunk;
  const std::uint64_t end = begin + chunk < items ? begin + chunk : items;
  for (std::uint64_t i = begin + lane; i < end; i += 32) {
    out[i] = work(static_cast<std::uint32_t>(i), cost);
  }
}

}  // namespace

cudaError_t EnqueueFill(const WorkQueueView& queue, std::uint64_t items, unsigned long long* stats,
                        int blocks, cudaStream_t stream) {
  fill<<<blocks, kSampleThreads, 0, stream>>>(queue, items, stats);
  return cudaGetLastError();
}

template <PopKind Kind>
cudaError_t Launch(const ConsumeArgs& args, int blocks, cudaStream_t stream) {
  consume<Kind><<<blocks, kSampleThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

template <PopKind Kind>
cudaError_t Occupancy(int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, consume<Kind>, kSampleThreads, 0);
}

cudaError_t EnqueueConsume(PopKind kind, const ConsumeArgs& args, int blocks, cudaStream_t stream) {
  switch (kind) {
    case PopKind::kSingle:
      return Launch<PopKind::kSingle>(args, blocks, stream);
    case PopKind::kWarp32:
      return Launch<PopKind::kWarp32>(args, blocks, stream);
    case PopKind::kWarp128:
      return Launch<PopKind::kWarp128>(args, blocks, stream);
    case PopKind::kWarp256:
      return Launch<PopKind::kWarp256>(args, blocks, stream);
    case PopKind::kBlock1024:
      return Launch<PopKind::kBlock1024>(args, blocks, stream);
    case PopKind::kBlock2048:
      return Launch<PopKind::kBlock2048>(args, blocks, stream);
    case PopKind::kBlock4096:
      return Launch<PopKind::kBlock4096>(args, blocks, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t ConsumeBlocksPerSm(PopKind kind, int* blocks) {
  switch (kind) {
    case PopKind::kSingle:
      return Occupancy<PopKind::kSingle>(blocks);
    case PopKind::kWarp32:
      return Occupancy<PopKind::kWarp32>(blocks);
    case PopKind::kWarp128:
      return Occupancy<PopKind::kWarp128>(blocks);
    case PopKind::kWarp256:
      return Occupancy<PopKind::kWarp256>(blocks);
    case PopKind::kBlock1024:
      return Occupancy<PopKind::kBlock1024>(blocks);
    case PopKind::kBlock2048:
      return Occupancy<PopKind::kBlock2048>(blocks);
    case PopKind::kBlock4096:
      return Occupancy<PopKind::kBlock4096>(blocks);
  }
  return cudaErrorInvalidValue;
}

cudaError_t EnqueueCountLost(const unsigned char* marks, std::uint64_t items,
                             unsigned long long* stats, cudaStream_t stream) {
  count_lost<<<1024, 256, 0, stream>>>(marks, items, stats);
  return cudaGetLastError();
}

cudaError_t EnqueueStaticOnePerItem(Cost cost, std::uint64_t items, float* out,
                                    cudaStream_t stream) {
  const std::uint64_t blocks = (items + kSampleThreads - 1) / kSampleThreads;
  static_one_per_item<<<static_cast<unsigned>(blocks), kSampleThreads, 0, stream>>>(cost, items,
                                                                                    out);
  return cudaGetLastError();
}

cudaError_t EnqueueStaticChunked(Cost cost, std::uint64_t items, float* out, int blocks,
                                 cudaStream_t stream) {
  static_chunked<<<blocks, kSampleThreads, 0, stream>>>(cost, items, out);
  return cudaGetLastError();
}

}  // namespace baton::samples
