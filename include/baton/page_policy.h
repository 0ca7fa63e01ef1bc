// The paging policy, written once beside the batch policy (batch_policy.h):
// a program whose items keep per-token state (the decoder model's KV cache)
// may hold it in fixed-size pages of one pool, handed out by the scheduler
// as items grow and taken back when they retire. These scalar functions are
// the reference; the device scheduler runs the warp-parallel version
// (scheduler/batch_ops.cuh, tested against this one) and host-driven loops
// call these through HostBatch. Host and device code; no Abseil.
//
// Rules:
//  - Reserve at admission: an item declares its worst case, the tokens it
//    may ever hold (ItemTokenBound: the high 32 bits of its payload), and is
//    admitted only while the pool's unreserved pages cover PagesFor(that).
//    The first item that does not fit waits at the head of the queue and
//    nothing behind it passes (no starvation of long requests). So a
//    running item can always grow: no preemption, no recomputation, no
//    request lost or repeated, and tokens never depend on pool pressure.
//  - Map as it grows: before each step, an item that will hold `n` tokens
//    after it gets pages until it has PagesFor(n), popped from the free
//    stack in position order, each item's in page order. Pages held <= used
//    + one page per item (the memory the pool lends is what items use).
//  - Release at retirement: a finished item's pages go back on the free
//    stack in position order, each item's in page order, and its reserve
//    returns to the pool.
// Why reserve rather than preempt: a preempted request recomputes its prompt
// (a whole prefill again) and changes the batch under the others; the
// reserve costs only concurrency when requests stop well before their
// max_new_tokens, and its pages are still only allocated as used.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "baton/step_args.h"
#include "baton/work_item.h"

namespace baton {

inline constexpr std::uint32_t kNoPage = 0xffffffffu;

// How a program's per-token state is paged (StepProgram::pages). Off when
// page_tokens is 0.
struct PagePolicy {
  std::uint32_t page_tokens = 0;     // tokens per page: a power of two
  std::uint32_t pool_pages = 0;      // pages in the pool
  std::uint32_t pages_per_slot = 0;  // a slot's row of the page table: most pages one item holds
  // The page table, device memory owned by the program, [max_batch slots]
  // [pages_per_slot]: entry j of slot s is the pool page holding the item's
  // tokens [j * page_tokens, (j + 1) * page_tokens). Written by the
  // scheduler before each step (entries past an item's pages are stale).
  std::uint32_t* page_table = nullptr;

  [[nodiscard]] BATON_HOST_DEVICE constexpr bool paged() const { return page_tokens != 0; }
};

// Pages that hold `tokens` tokens.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t PagesFor(const PagePolicy& policy,
                                                                 std::uint64_t tokens) {
  const std::uint64_t pages = (tokens + policy.page_tokens - 1) / policy.page_tokens;
  return pages > 0xffffffffu ? 0xffffffffu : static_cast<std::uint32_t>(pages);
}

// The most tokens an item may ever hold: the high 32 bits of its payload (a
// decoder request's prompt + max_new_tokens, DecoderModel::WorkItemFor).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t ItemTokenBound(const WorkItem& item) {
  return static_cast<std::uint32_t>(item.payload >> 32);
}

// The pages an item reserves: PagesFor(its bound), at least one and at most
// what one slot and the pool hold (the host refuses items past those at
// Submit; the clamp keeps a forged item from waiting forever or indexing
// past its slot's row: it then simply gets no pages past its reserve).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t ItemPageReserve(const PagePolicy& policy,
                                                                        const WorkItem& item) {
  std::uint32_t pages = PagesFor(policy, ItemTokenBound(item));
  if (pages == 0) pages = 1;
  if (pages > policy.pages_per_slot) pages = policy.pages_per_slot;
  return pages > policy.pool_pages ? policy.pool_pages : pages;
}

// The pool's bookkeeping (the scheduler's, or HostBatch's): a stack of free
// pages and the pages reserved by admitted items.
struct PagePool {
  std::uint32_t* free_pages = nullptr;  // [pool_pages], [0, free_count) free, top last
  std::uint32_t free_count = 0;
  std::uint32_t reserved = 0;
};

// Whether `item` may be admitted now: its reserve fits what is unreserved.
[[nodiscard]] BATON_HOST_DEVICE constexpr bool PoolAdmits(const PagePolicy& policy,
                                                          const PagePool& pool,
                                                          const WorkItem& item) {
  return ItemPageReserve(policy, item) <= policy.pool_pages - pool.reserved;
}

// The pages position p holds once it has `tokens` tokens (capped at its
// reserve).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t HeldPages(const PagePolicy& policy,
                                                                  const WorkItem& item,
                                                                  std::uint64_t tokens) {
  const std::uint32_t pages = PagesFor(policy, tokens);
  const std::uint32_t reserve = ItemPageReserve(policy, item);
  return pages < reserve ? pages : reserve;
}

// The entries [first, end) of position p's page-table row that its step
// maps: from what it held before the step to what it holds after it.
struct StepPageSpan {
  std::uint32_t first = 0, end = 0;
};
[[nodiscard]] BATON_HOST_DEVICE constexpr StepPageSpan StepPages(const PagePolicy& policy,
                                                                 const StepArgs& a,
                                                                 std::uint32_t p) {
  return {HeldPages(policy, a.items[p], a.item_tokens[p]),
          HeldPages(policy, a.items[p], std::uint64_t{a.item_tokens[p]} + a.tokens[p])};
}

// Map: before the step, every position [0, batch) gets the entries of its
// StepPages, in position order, popping the free stack. Returns the pages
// handed out.
BATON_HOST_DEVICE inline std::uint32_t MapStepPages(const PagePolicy& policy, const StepArgs& a,
                                                    std::uint32_t batch, PagePool& pool) {
  std::uint32_t handed = 0;
  for (std::uint32_t p = 0; p < batch; ++p) {
    const StepPageSpan span = StepPages(policy, a, p);
    std::uint32_t* row = policy.page_table + std::size_t{a.slots[p]} * policy.pages_per_slot;
    for (std::uint32_t j = span.first; j < span.end && pool.free_count > 0; ++j) {
      row[j] = pool.free_pages[--pool.free_count];
      ++handed;
    }
  }
  return handed;
}

// Release: position p retires after its step (call before RetireStep moves
// anything): its pages go back on the stack, its reserve to the pool.
BATON_HOST_DEVICE inline void ReleaseItemPages(const PagePolicy& policy, const StepArgs& a,
                                               std::uint32_t p, PagePool& pool) {
  const std::uint32_t held =
      HeldPages(policy, a.items[p], std::uint64_t{a.item_tokens[p]} + a.tokens[p]);
  const std::uint32_t* row = policy.page_table + std::size_t{a.slots[p]} * policy.pages_per_slot;
  for (std::uint32_t j = 0; j < held; ++j) pool.free_pages[pool.free_count++] = row[j];
  pool.reserved -= ItemPageReserve(policy, a.items[p]);
}

}  // namespace baton
