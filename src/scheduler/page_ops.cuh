// The paging policy of baton/page_policy.h run by the scheduler's warp, as
// batch_ops.cuh runs the batch policy (tested against the scalar reference
// in batch_ops_gpu_test.cc): release a retiring item's pages, admit held
// and newly popped items while the pool covers their reserves, map the
// pages the planned step needs. Each function is called by all 32 lanes of
// one warp; positions go 32 at a time and pages move in the reference's
// order, so the stack and the table match it entry for entry.
#pragma once

#include <cstdint>

#include "baton/page_policy.h"
#include "scheduler/batch_ops.cuh"

namespace baton::detail {

// The value of `v` in the warp's last lane (a sum's total).
[[nodiscard]] __device__ inline std::uint32_t warp_last(std::uint32_t v) {
  return __shfl_sync(kFullWarp, v, 31);
}

// Before warp_compact: every finished position in [0, batch) pushes its
// pages on the free stack (position order, page order) and returns its
// reserve (ReleaseItemPages).
__device__ inline void warp_release_pages(const PagePolicy& pages, const StepArgs& args,
                                          const BatchBook& book, std::uint32_t batch) {
  std::uint32_t free_count = book.counts->free_pages;
  std::uint32_t released = 0;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    const std::uint32_t p = base + lane_id();
    const bool done = p < batch && args.finished[p] != 0;
    std::uint32_t held = 0, reserve = 0;
    const std::uint32_t* row = nullptr;
    if (done) {
      const WorkItem item = args.items[p];
      held = HeldPages(pages, item, std::uint64_t{args.item_tokens[p]} + args.tokens[p]);
      reserve = ItemPageReserve(pages, item);
      row = pages.page_table + std::size_t{args.slots[p]} * pages.pages_per_slot;
    }
    const std::uint32_t through = warp_inclusive_sum(held);
    for (std::uint32_t j = 0; j < held; ++j) {
      book.free_pages[free_count + through - held + j] = row[j];
    }
    free_count += warp_last(through);
    released += warp_last(warp_inclusive_sum(reserve));
  }
  __syncwarp();
  if (lane_id() == 0) {
    book.counts->free_pages = free_count;
    book.counts->reserved_pages -= released;
  }
  __syncwarp();
}

// Admits the lanes' items (`offered`: a prefix of lanes, in queue order) at
// the end of the batch while a slot is free and the pool covers each one's
// reserve (PoolAdmits, in order: the first that does not fit stops the
// rest). Returns the new batch and sets `admitted` to the lanes that joined
// (a prefix).
__device__ inline std::uint32_t warp_admit_reserving(const PagePolicy& pages, const StepArgs& args,
                                                     const BatchBook& book, std::uint32_t batch,
                                                     const WorkItem& item, bool offered,
                                                     std::uint32_t& admitted) {
  const std::uint32_t reserved = book.counts->reserved_pages;
  const std::uint32_t room = book.counts->free_count;
  const std::uint32_t cost = offered ? ItemPageReserve(pages, item) : 0;
  const std::uint32_t through = warp_inclusive_sum(cost);
  const bool fits = offered && lane_id() < room && through <= pages.pool_pages - reserved;
  // `through` only grows, so the lanes that fit are a prefix.
  admitted = __popc(__ballot_sync(kFullWarp, fits));
  const std::uint32_t taken = admitted > 0 ? __shfl_sync(kFullWarp, through, admitted - 1) : 0;
  batch = warp_admit(args, book, batch, item, fits);
  if (lane_id() == 0) book.counts->reserved_pages = reserved + taken;
  __syncwarp();
  return batch;
}

// The held items first (call before popping): admits them in order while
// they fit, keeps the rest held in order. `held` is book.counts->held, which
// the caller loaded with its first loads, and comes back as what is still
// held. Returns the new batch.
__device__ inline std::uint32_t warp_admit_held(const PagePolicy& pages, const StepArgs& args,
                                                const BatchBook& book, std::uint32_t batch,
                                                std::uint32_t& held) {
  if (held == 0) return batch;  // the usual case: no load, no write
  const bool mine = lane_id() < held;
  const WorkItem item = mine ? book.held[lane_id()] : WorkItem{};
  std::uint32_t admitted = 0;
  batch = warp_admit_reserving(pages, args, book, batch, item, mine, admitted);
  // Every lane read its item above; the rest move down.
  if (mine && lane_id() >= admitted) book.held[lane_id() - admitted] = item;
  if (lane_id() == 0) book.counts->held = held - admitted;
  __syncwarp();
  held -= admitted;
  return batch;
}

// A pop's claim (`valid` lanes, a prefix, in queue order; nothing held):
// admits what fits, holds the rest. Returns the new batch; `holding` is
// true when something is now held (pop nothing more this decision).
__device__ inline std::uint32_t warp_offer_popped(const PagePolicy& pages, const StepArgs& args,
                                                  const BatchBook& book, std::uint32_t batch,
                                                  const WorkItem& item, bool valid, bool& holding) {
  std::uint32_t admitted = 0;
  batch = warp_admit_reserving(pages, args, book, batch, item, valid, admitted);
  const std::uint32_t claimed = __popc(__ballot_sync(kFullWarp, valid));
  if (valid && lane_id() >= admitted) book.held[lane_id() - admitted] = item;
  if (lane_id() == 0) book.counts->held = claimed - admitted;
  __syncwarp();
  holding = claimed > admitted;
  return batch;
}

// After the token plan: every position [0, batch) gets pages up to
// HeldPages(item_tokens + tokens), popped from the free stack in position
// order, each position's in page order (MapStepPages).
__device__ inline void warp_map_pages(const PagePolicy& pages, const StepArgs& args,
                                      const BatchBook& book, std::uint32_t batch) {
  std::uint32_t free_count = book.counts->free_pages;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    const std::uint32_t p = base + lane_id();
    std::uint32_t have = 0, need = 0;
    std::uint32_t* row = nullptr;
    if (p < batch) {
      const WorkItem item = args.items[p];
      const std::uint32_t ran = args.item_tokens[p];
      have = HeldPages(pages, item, ran);
      need = HeldPages(pages, item, std::uint64_t{ran} + args.tokens[p]);
      row = pages.page_table + std::size_t{args.slots[p]} * pages.pages_per_slot;
    }
    const std::uint32_t n = need - have;
    const std::uint32_t through = warp_inclusive_sum(n);
    for (std::uint32_t j = 0; j < n; ++j) {
      const std::uint32_t k = through - n + j;  // the k-th page this round pops
      if (k < free_count) row[have + j] = book.free_pages[free_count - 1 - k];
    }
    const std::uint32_t total = warp_last(through);
    free_count -= total < free_count ? total : free_count;
  }
  __syncwarp();
  if (lane_id() == 0) book.counts->free_pages = free_count;
  __syncwarp();
}

}  // namespace baton::detail
