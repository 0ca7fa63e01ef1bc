// Device API of the work queue: a bounded multi-producer multi-consumer ring of
// 16-byte WorkItems in device memory. Header-only, __device__ inline, no
// Abseil: any kernel (the scheduler, a worker grid, a test) can use it with a
// WorkQueueView passed by value (WorkQueue::device_view()).
//
// Protocol (Broker Queue, Kerbl et al. 2018, with Vyukov per-slot sequences):
//   consumer: reserve n <= k from `items` (a load, then one fetch_sub; an
//             over-claim is given back with one fetch_add), take tickets [h, h+n) with one
//             fetch_add on `head`, then per slot wait until sequence == t+1,
//             read the descriptor, store sequence = t + capacity, and finally
//             return n slots to `free_slots` (one fetch_add).
//   producer: the mirror image: reserve from `free_slots`, fetch_add on
//             `tail`, wait until sequence == t, write, store sequence = t+1,
//             then add n to `items`.
// Reserving before taking tickets is what makes the ring bounded and
// lossless: a consumer only takes tickets some producer has already taken
// (so the wait is for a thread that is mid-publish, never for one that may
// never come), and a producer only takes a slot whose previous consumer has
// already taken its ticket. A full queue refuses instead of overwriting; an
// empty queue returns "no item" instead of waiting.
//
// Guarantees:
//   * Exactly once: every accepted item is returned by exactly one pop; none
//     is lost, duplicated or invented. Refused pushes say so (return false).
//   * Order: tickets are FIFO. A single claimant sees its items in push
//     order; with several consumers items are handed out in ticket order but
//     processed in any order. Within a warp/block batch, rank r gets tickets
//     first + r, first + r + n_threads, ...
//   * 64-bit tickets and sequences compared for equality only, so the ring
//     keeps working across 2^32 and across the 2^64 wrap (tested).
//   * Why waits end: tickets are held only inside these calls, and a holder
//     waits only for the holder of an older ticket (a consumer of t for the
//     producer of t, a producer of t for the consumer of t - capacity), so
//     every chain of waits ends. Callers must not break this from outside:
//     every thread that enters a pop/push must be able to finish it (block
//     pops therefore claim only after the whole block reached the call).
//   * Every wait is bounded (view.max_wait_spins sleeps). A wait that runs out
//     records DeviceErrorSite::kQueueWait in the queue's error word and the
//     lane gets an invalid item: the run is broken (that item may be lost) and
//     the host sees a Status from WorkQueue::CheckDeviceError(). It can only
//     happen if a thread holding a ticket stops making progress (it exited
//     mid-push, or was never scheduled), not because the queue is empty/full.
//   * "No item" (invalid) from a pop means no item was available to this
//     claim at that moment; a concurrent over-claim may make it report empty
//     while another consumer is about to hand an item back, so callers retry
//     until they get the terminate sentinel. Terminate is exact: a pop returns
//     it only if the queue was closed before the claim and every ticket has
//     been claimed.
//   * "Full" (a refused push) likewise means no free slot was available to
//     this claim at that moment; concurrent producers' over-claims can make a
//     push refuse while one of them is about to give a slot back. The host
//     Seed on an otherwise idle queue is exact (tested).
//   * Close is the producers' promise that every push (host seeds and device
//     pushes) has finished. Device pushes seen after close are refused
//     (best effort); anything left in the ring is still returned by
//     WorkQueue::Drain(), never dropped.
//
// Atomic read-modify-writes per claim: 3 on the consumer side (items, head,
// free_slots; 4 when an over-claim is given back), 3 on the producer side,
// each claim preceded by one plain load of the counter it reserves from; an
// empty (or full) answer costs that load only.
// Per item: one relaxed sequence load, one relaxed sequence store and the
// 16-byte descriptor access, with one acquire and one release fence per lane
// and claim (not per item).
#pragma once

#include <cuda_runtime.h>

#include <cuda/atomic>
#include <cuda/ptx>

#include "baton/device_error_word.h"
#include "baton/work_item.h"

namespace baton {

// What one pop hands to a lane (warp pop) or thread (block pop): ItemsPerLane
// descriptors, invalid past the claimed count, all terminate once the queue is
// finished. `claimed` is the whole group's count (the same in every lane).
template <int ItemsPerLane = 1>
struct LaneItems {
  WorkItem item[ItemsPerLane];
  unsigned claimed;
  [[nodiscard]] __device__ bool terminated() const { return item[0].is_terminate(); }
};

// Shared memory a block pop uses to broadcast its claim (one per block).
struct BlockPopStorage {
  unsigned long long first;
  unsigned count;
  unsigned terminate;
};

namespace queue_detail {

using TicketRef = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;
using CountRef = cuda::atomic_ref<long long, cuda::thread_scope_device>;
using FlagRef = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>;

struct Claim {
  unsigned long long first;
  unsigned count;
  bool terminate;
};

// Takes up to `want` units from a counter of available units. A plain load
// first: claimants that see nothing leave the counter alone, and the others
// ask only for what they saw. Then one fetch_sub, and one fetch_add to give
// back what was no longer there. The counter may dip below zero between the
// two; other claimants then see too little (never too much), which is why an
// empty answer is only "empty for now". Without the load, thousands of warps
// polling a near-empty ring keep the counter below zero with their own
// give-backs and nobody gets an item (our 16896-warp stress test on a
// 16384-slot ring made no progress in 150 s without this load).
[[nodiscard]] __device__ inline unsigned reserve(long long& counter, unsigned want) {
  CountRef ref(counter);
  const long long seen = ref.load(cuda::std::memory_order_relaxed);
  if (seen <= 0) return 0;
  const long long ask = seen < static_cast<long long>(want) ? seen : want;
  const long long old = ref.fetch_sub(ask, cuda::std::memory_order_relaxed);
  const long long got = old <= 0 ? 0 : (old < ask ? old : ask);
  if (got < ask) ref.fetch_add(ask - got, cuda::std::memory_order_relaxed);
  return static_cast<unsigned>(got);
}

// Waits (bounded, with sleeps) until slot `slot` carries `expected`.
[[nodiscard]] __device__ inline bool wait_sequence(const WorkQueueView& q, unsigned long long slot,
                                                   unsigned long long expected) {
  TicketRef seq(q.sequence[slot]);
  for (std::uint32_t spin = 0; spin < q.max_wait_spins; ++spin) {
    __nanosleep(spin < 16 ? 32 : 1000);
    if (seq.load(cuda::std::memory_order_relaxed) == expected) return true;
  }
  return false;
}

[[nodiscard]] __device__ inline WorkItem load_item(const WorkItem* slot) {
  // L2 (not L1): the slot was written by another SM since this SM last saw it.
  const uint4 v = __ldcg(reinterpret_cast<const uint4*>(slot));
  return WorkItem::make(v.x, v.y, (static_cast<std::uint64_t>(v.w) << 32) | v.z);
}

__device__ inline void store_item(WorkItem* slot, const WorkItem& item) {
  const uint4 v = make_uint4(item.kind, item.id, static_cast<std::uint32_t>(item.payload),
                             static_cast<std::uint32_t>(item.payload >> 32));
  __stcg(reinterpret_cast<uint4*>(slot), v);
}

[[nodiscard]] __device__ inline bool closed(const WorkQueueView& q) {
  return FlagRef(q.counters->closed).load(cuda::std::memory_order_acquire) != 0;
}

// One claimant's consumer-side claim of up to `want` tickets.
[[nodiscard]] __device__ inline Claim claim_pop(const WorkQueueView& q, unsigned want) {
  want = want < q.max_batch ? want : q.max_batch;
  if (want == 0) return {0, 0, false};
  // Read before reserving: if the queue was already closed, no push can race
  // with this claim, so "nothing reserved and head == tail" means finished.
  const bool was_closed = closed(q);
  const unsigned got = reserve(q.counters->items, want);
  if (got > 0) {
    const unsigned long long first =
        TicketRef(q.counters->head).fetch_add(got, cuda::std::memory_order_relaxed);
    return {first, got, false};
  }
  if (!was_closed) return {0, 0, false};
  const unsigned long long tail = TicketRef(q.counters->tail).load(cuda::std::memory_order_acquire);
  const unsigned long long head = TicketRef(q.counters->head).load(cuda::std::memory_order_acquire);
  return {0, 0, head == tail};
}

// One claimant's producer-side claim of up to `want` tickets (0 when full or
// closed).
[[nodiscard]] __device__ inline Claim claim_push(const WorkQueueView& q, unsigned want) {
  if (want == 0 || closed(q)) return {0, 0, false};
  const unsigned got = reserve(q.counters->free_slots, want);
  if (got == 0) return {0, 0, false};
  const unsigned long long first =
      TicketRef(q.counters->tail).fetch_add(got, cuda::std::memory_order_relaxed);
  return {first, got, false};
}

__device__ inline void record_wait_failure(const WorkQueueView& q, QueueWaitCode code) {
  record_device_error(&q.counters->error_word, DeviceErrorSite::kQueueWait,
                      static_cast<std::uint32_t>(code));
}

// Consumes this lane's tickets first + stride * j for j < N where
// stride * j + offset < count: all sequence loads are issued before any wait,
// then one acquire fence, the descriptor loads, one release fence and the
// sequence stores that hand the slots back to producers.
template <int N>
__device__ inline void take(const WorkQueueView& q, unsigned long long first, unsigned offset,
                            unsigned stride, unsigned count, WorkItem (&out)[N]) {
  unsigned long long seq[N];
  bool mine[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const unsigned index = offset + stride * static_cast<unsigned>(j);
    mine[j] = index < count;
    if (mine[j]) {
      seq[j] =
          TicketRef(q.sequence[(first + index) & q.mask]).load(cuda::std::memory_order_relaxed);
    }
  }
  bool all_ok = true;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const unsigned long long ticket = first + offset + stride * static_cast<unsigned>(j);
    if (mine[j] && seq[j] != ticket + 1 && !wait_sequence(q, ticket & q.mask, ticket + 1)) {
      mine[j] = false;  // never published in time: leave the slot alone
      all_ok = false;
    }
  }
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const unsigned long long ticket = first + offset + stride * static_cast<unsigned>(j);
    out[j] = mine[j] ? load_item(q.slots + (ticket & q.mask)) : WorkItem::invalid();
  }
  // The descriptor loads must complete before a producer may overwrite the slot.
  cuda::atomic_thread_fence(cuda::std::memory_order_release, cuda::thread_scope_device);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const unsigned long long ticket = first + offset + stride * static_cast<unsigned>(j);
    if (mine[j]) {
      TicketRef(q.sequence[ticket & q.mask])
          .store(ticket + q.capacity(), cuda::std::memory_order_relaxed);
    }
  }
  if (!all_ok) record_wait_failure(q, QueueWaitCode::kConsumerWait);
}

// Publishes `item` at `ticket` (the slot's previous consumer is at worst mid-read).
[[nodiscard]] __device__ inline bool put(const WorkQueueView& q, unsigned long long ticket,
                                         const WorkItem& item) {
  const unsigned long long slot = ticket & q.mask;
  TicketRef seq(q.sequence[slot]);
  if (seq.load(cuda::std::memory_order_relaxed) != ticket && !wait_sequence(q, slot, ticket)) {
    record_wait_failure(q, QueueWaitCode::kProducerWait);
    return false;
  }
  // Our descriptor store must not overtake the consumer's release of the slot.
  cuda::atomic_thread_fence(cuda::std::memory_order_acquire, cuda::thread_scope_device);
  store_item(q.slots + slot, item);
  seq.store(ticket + 1, cuda::std::memory_order_release);
  return true;
}

__device__ inline void release_slots(const WorkQueueView& q, unsigned count) {
  CountRef(q.counters->free_slots).fetch_add(count, cuda::std::memory_order_relaxed);
}

__device__ inline void publish_items(const WorkQueueView& q, unsigned count) {
  CountRef(q.counters->items).fetch_add(count, cuda::std::memory_order_relaxed);
}

template <int N>
__device__ inline void fill(WorkItem (&out)[N], const WorkItem& value) {
#pragma unroll
  for (int j = 0; j < N; ++j) out[j] = value;
}

}  // namespace queue_detail

// ---------------------------------------------------------------------------
// Consumers

// Per-thread pop: claims one item. Returns the item, WorkItem::invalid() when
// none is available now, or WorkItem::terminate() once the queue is finished.
// Three contended atomics per item: use the warp/block pops where possible.
[[nodiscard]] __device__ inline WorkItem pop_single(const WorkQueueView& q) {
  const queue_detail::Claim claim = queue_detail::claim_pop(q, 1);
  if (claim.count == 0) return claim.terminate ? WorkItem::terminate() : WorkItem::invalid();
  WorkItem item[1];
  queue_detail::take<1>(q, claim.first, 0, 1, 1, item);
  queue_detail::release_slots(q, 1);
  return item[0];
}

// Warp-batched pop. Every lane that is active (__activemask) at the call takes
// part; inactive or exited lanes are simply not counted. The lowest active lane
// claims min(max_items, active lanes * ItemsPerLane, view.max_batch) items with
// one atomic on `head`, broadcasts the first ticket with __shfl_sync, and the
// lane of rank r among the active lanes gets tickets first + r + j * lanes.
// `max_items` is taken from that leader lane.
template <int ItemsPerLane = 1>
[[nodiscard]] __device__ inline LaneItems<ItemsPerLane> pop_warp_batch(const WorkQueueView& q,
                                                                       unsigned max_items) {
  static_assert(ItemsPerLane >= 1, "a lane takes at least one item");
  const unsigned mask = __activemask();
  const unsigned lanes = static_cast<unsigned>(__popc(mask));
  const unsigned rank = static_cast<unsigned>(__popc(mask & cuda::ptx::get_sreg_lanemask_lt()));
  const int leader = __ffs(mask) - 1;
  queue_detail::Claim claim{0, 0, false};
  if (rank == 0) {
    const unsigned room = lanes * ItemsPerLane;
    claim = queue_detail::claim_pop(q, max_items < room ? max_items : room);
  }
  const unsigned long long first = __shfl_sync(mask, claim.first, leader);
  const unsigned count = __shfl_sync(mask, claim.count, leader);
  const bool terminate = __shfl_sync(mask, claim.terminate ? 1 : 0, leader) != 0;
  LaneItems<ItemsPerLane> result;
  result.claimed = count;
  if (count == 0) {
    queue_detail::fill(result.item, terminate ? WorkItem::terminate() : WorkItem::invalid());
    return result;
  }
  queue_detail::take<ItemsPerLane>(q, first, rank, lanes, count, result.item);
  __syncwarp(mask);
  if (rank == 0) queue_detail::release_slots(q, count);
  return result;
}

// Block-batched pop: must be called by every thread of the block (it uses
// __syncthreads: three per call). Thread 0 claims min(max_items, threads * ItemsPerThread,
// view.max_batch) items; thread r gets tickets first + r + j * threads.
template <int ItemsPerThread = 1>
[[nodiscard]] __device__ inline LaneItems<ItemsPerThread> pop_block_batch(
    const WorkQueueView& q, unsigned max_items, BlockPopStorage& storage) {
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned rank = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  // Claim only once the whole block is here. Claiming first and then waiting
  // at a barrier for sibling warps that are mid-push deadlocks: such a warp
  // can be waiting for one of the slots this claim holds (seen on an H200 as
  // a producer wait that ran out).
  __syncthreads();
  if (rank == 0) {
    const unsigned room = threads * ItemsPerThread;
    const queue_detail::Claim claim =
        queue_detail::claim_pop(q, max_items < room ? max_items : room);
    storage.first = claim.first;
    storage.count = claim.count;
    storage.terminate = claim.terminate ? 1 : 0;
  }
  __syncthreads();
  const unsigned long long first = storage.first;
  const unsigned count = storage.count;
  const bool terminate = storage.terminate != 0;
  LaneItems<ItemsPerThread> result;
  result.claimed = count;
  if (count == 0) {
    queue_detail::fill(result.item, terminate ? WorkItem::terminate() : WorkItem::invalid());
  } else {
    queue_detail::take<ItemsPerThread>(q, first, rank, threads, count, result.item);
  }
  // Also keeps thread 0 from overwriting `storage` before everyone read it.
  __syncthreads();
  if (rank == 0 && count > 0) queue_detail::release_slots(q, count);
  return result;
}

// ---------------------------------------------------------------------------
// Producers

// Pushes one item. False when the queue is full or closed, or `item` is not
// valid (sentinels cannot be pushed): the caller still owns the item.
[[nodiscard]] __device__ inline bool push_single(const WorkQueueView& q, const WorkItem& item) {
  if (!item.is_valid()) return false;
  const queue_detail::Claim claim = queue_detail::claim_push(q, 1);
  if (claim.count == 0) return false;
  const bool ok = queue_detail::put(q, claim.first, item);
  queue_detail::publish_items(q, 1);
  return ok;
}

// Warp-aggregated push: the active lanes with has_item and a valid item push
// together with one reservation and one `tail` atomic. When space runs out the
// lowest-ranked lanes win; each lane learns whether its item was accepted.
[[nodiscard]] __device__ inline bool push_warp_aggregated(const WorkQueueView& q,
                                                          const WorkItem& item,
                                                          bool has_item = true) {
  const unsigned mask = __activemask();
  const bool wants = has_item && item.is_valid();
  const unsigned wanting = __ballot_sync(mask, wants);
  if (wanting == 0) return false;
  const unsigned rank_all = static_cast<unsigned>(__popc(mask & cuda::ptx::get_sreg_lanemask_lt()));
  const int leader = __ffs(mask) - 1;
  queue_detail::Claim claim{0, 0, false};
  if (rank_all == 0) claim = queue_detail::claim_push(q, static_cast<unsigned>(__popc(wanting)));
  const unsigned long long first = __shfl_sync(mask, claim.first, leader);
  const unsigned count = __shfl_sync(mask, claim.count, leader);
  if (count == 0) return false;
  const unsigned rank = static_cast<unsigned>(__popc(wanting & cuda::ptx::get_sreg_lanemask_lt()));
  const bool accepted = wants && rank < count;
  if (accepted) (void)queue_detail::put(q, first + rank, item);
  __syncwarp(mask);
  if (rank_all == 0) queue_detail::publish_items(q, count);
  return accepted;
}

}  // namespace baton
