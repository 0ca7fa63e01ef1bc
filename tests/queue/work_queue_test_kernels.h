// Kernels for work_queue_gpu_test behind a plain C++ interface (the test uses
// Abseil, which stays out of .cu files).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/work_item.h"

namespace baton::test {

// The descriptor every test pushes for id `id`: consumers check kind and
// payload, so a torn or stale slot read shows up as "corrupted".
[[nodiscard]] BATON_HOST_DEVICE constexpr WorkItem TestItem(std::uint32_t id) {
  return WorkItem::make(id % 1021u, id, (std::uint64_t{id} * 0x9E3779B97F4A7C15ull) ^ 0x5bd1e995u);
}

// How a consumer pops. kWarpN: pop_warp_batch<N>; kBlock8: pop_block_batch<8>.
enum class PopMode : int { kSingle = 0, kWarp1 = 1, kWarp2 = 2, kWarp8 = 3, kBlock8 = 4 };

// stats words written by the consumers.
enum StatWord : int {
  kPhantom = 0,     // an id that was never pushed
  kCorrupted = 1,   // right id, wrong kind/payload
  kUnexpected = 2,  // a terminate sentinel where none may appear
  kOutOfTime = 3,   // a warp gave up after budget_ns (the test's own bound)
  kTerminated = 4,  // consumer warps that saw terminate
  kStatWords = 8,
};

struct ContentionArgs {
  WorkQueueView queue;
  PopMode mode = PopMode::kWarp1;
  unsigned batch = 32;                     // max_items per pop
  std::uint64_t total_items = 0;           // ids [0, total_items) are pushed once each
  unsigned* deliveries = nullptr;          // per-id counter, zeroed by the caller
  unsigned long long* consumed = nullptr;  // claimed tickets so far, zeroed by the caller
  unsigned long long* stats = nullptr;     // kStatWords, zeroed by the caller
  unsigned long long budget_ns = 0;        // wall-clock bound of each warp (%globaltimer)
};

// Every warp pushes its share of ids with push_warp_aggregated and pops with
// `mode` until all ids were consumed: device producers and consumers at once.
[[nodiscard]] cudaError_t EnqueueProduceConsume(const ContentionArgs& args, int blocks,
                                                cudaStream_t stream);
// Resident blocks of 256 threads per SM for EnqueueProduceConsume's kernel.
[[nodiscard]] cudaError_t ProduceConsumeBlocksPerSm(PopMode mode, int* blocks);
constexpr int kContentionThreads = 256;

// Consumer-only grid (warp pops of `batch`): marks deliveries until every warp
// got the terminate sentinel (stats[kTerminated] counts warps).
[[nodiscard]] cudaError_t EnqueueConsumeUntilTerminate(const ContentionArgs& args, int blocks,
                                                       cudaStream_t stream);

// out[0] = ids delivered 0 times, out[1] = extra deliveries (sum of count - 1).
[[nodiscard]] cudaError_t EnqueueCountDeliveries(const unsigned* deliveries, std::uint64_t n,
                                                 unsigned long long* out, cudaStream_t stream);

// One warp of 32 threads; lane l pops (pop_warp_batch<2>) in rounds r <
// exit_round[l] and returns before the others when its round comes. out is
// [rounds][32][2]; active_masks[r] is __activemask() seen in round r.
[[nodiscard]] cudaError_t EnqueueLaneExitPops(WorkQueueView queue, const unsigned* exit_round,
                                              unsigned max_items, unsigned rounds, WorkItem* out,
                                              unsigned* active_masks, cudaStream_t stream);

// One thread calls pop_single `count` times into out.
[[nodiscard]] cudaError_t EnqueuePopSingle(WorkQueueView queue, WorkItem* out, unsigned count,
                                           cudaStream_t stream);

// 256 threads push TestItem(id) for ids [0, count) with push_warp_aggregated,
// each id once; accepted[id] = 1 where the push succeeded.
[[nodiscard]] cudaError_t EnqueueDevicePush(WorkQueueView queue, unsigned count, unsigned* accepted,
                                            cudaStream_t stream);

// A producer that takes a ticket and "dies" before publishing it, then makes
// the ticket claimable: the next consumer's bounded wait must run out.
[[nodiscard]] cudaError_t EnqueueAbandonTicket(WorkQueueView queue, cudaStream_t stream);

}  // namespace baton::test
