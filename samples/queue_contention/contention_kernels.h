// Kernels of the queue_contention sample behind a plain C++ interface (the
// sample's main uses Abseil, which stays out of .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/work_item.h"

namespace baton::samples {

// How consumers pop: per thread, warp batches of 32, 128 or 256 (1, 4 or 8
// items per lane), block batches of 1024, 2048 or 4096 (256 threads x 4, 8, 16).
enum class PopKind : int {
  kSingle = 0,
  kWarp32 = 1,
  kWarp128 = 2,
  kWarp256 = 3,
  kBlock1024 = 4,
  kBlock2048 = 5,
  kBlock4096 = 6,
};

// Per-item work: none, light (32 iterations), uneven (id % 256 iterations) or
// clustered (runs of 4096 items, one run in 16 costs 2048 iterations, the
// rest 8) of a sin*cos multiply-add.
enum class Cost : int { kNone = 0, kLight = 1, kUneven = 2, kClustered = 3 };

[[nodiscard]] BATON_HOST_DEVICE constexpr WorkItem SampleItem(std::uint32_t id) {
  return WorkItem::make(id % 1021u, id, (std::uint64_t{id} * 0x9E3779B97F4A7C15ull) ^ 0xabcdefull);
}

// stats words
enum SampleStat : int {
  kDelivered = 0,
  kPhantom = 1,
  kCorrupted = 2,
  kRefused = 3,
  kLost = 4,
  kSampleStats = 8
};

struct ConsumeArgs {
  WorkQueueView queue;
  Cost cost = Cost::kNone;
  std::uint64_t items = 0;         // ids [0, items) are in the queue
  unsigned char* marks = nullptr;  // marks[id] = 1 when delivered (zeroed by the caller)
  float* out = nullptr;            // out[id] = work(id), or nullptr to discard
  unsigned long long* stats = nullptr;
};

// Device producers fill the queue with SampleItem(0..items-1) (push_warp_aggregated).
[[nodiscard]] cudaError_t EnqueueFill(const WorkQueueView& queue, std::uint64_t items,
                                      unsigned long long* stats, int blocks, cudaStream_t stream);
// Consumers pop until the queue is empty (there are no producers, so "empty"
// is exact), do the per-item work and mark deliveries.
[[nodiscard]] cudaError_t EnqueueConsume(PopKind kind, const ConsumeArgs& args, int blocks,
                                         cudaStream_t stream);
// stats[kLost] += ids whose mark is still 0.
[[nodiscard]] cudaError_t EnqueueCountLost(const unsigned char* marks, std::uint64_t items,
                                           unsigned long long* stats, cudaStream_t stream);
// Static schedules: one thread per item (grid of ceil(items / 256) blocks),
// or a fixed grid where each warp owns a contiguous chunk.
[[nodiscard]] cudaError_t EnqueueStaticOnePerItem(Cost cost, std::uint64_t items, float* out,
                                                  cudaStream_t stream);
[[nodiscard]] cudaError_t EnqueueStaticChunked(Cost cost, std::uint64_t items, float* out,
                                               int blocks, cudaStream_t stream);
constexpr int kSampleThreads = 256;
// Resident 256-thread blocks per SM of the consumer kernel.
[[nodiscard]] cudaError_t ConsumeBlocksPerSm(PopKind kind, int* blocks);

}  // namespace baton::samples
