// A batch kept in host memory and moved by the batch policy (batch_policy.h):
// the arrays a step's StepArgs point at, the free-slot stack and the batch
// size, and, for a paged program (page_policy.h), the page pool and a host
// copy of the page table that the loop uploads when it changed. Host-driven loops (the decode_loop
// sample's host loop, the tests' host decode loop) and the tests of the device scheduler replay the
// device's decisions with it, so every driver retires, admits and chunks
// through the same functions. Host code only; no Abseil.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/batch_policy.h"
#include "baton/page_policy.h"
#include "baton/step_args.h"
#include "baton/work_item.h"

namespace baton {

class HostBatch {
 public:
  // A batch of up to `max_batch` positions in arrays of its own, empty, with
  // every slot free.
  // `pages`: the program's paging (its page_table is the device table the
  // loop uploads page_table() to; this object keeps its own host copy).
  explicit HostBatch(std::uint32_t max_batch, const PagePolicy& pages = {})
      : items_(max_batch), words_(std::size_t{kStepWords} * max_batch) {
    args_.items = items_.data();
    args_.max_batch = max_batch;
    PointStepWords(args_, words_.data());
    SetPages(pages);
  }
  // A batch kept in the caller's host arrays (`arrays`: items, the word
  // arrays and max_batch; e.g. mapped memory a loop uploads from), which
  // must outlive this object. Empty, with every slot free.
  explicit HostBatch(const StepArgs& arrays, const PagePolicy& pages = {}) : args_(arrays) {
    SetPages(pages);
  }
  // args() may point into this object's arrays.
  HostBatch(const HostBatch&) = delete;
  HostBatch& operator=(const HostBatch&) = delete;

  // Empty again, with the device scheduler's initial free stack (slot 0 on
  // top), so host and device hand out the same slots.
  void Reset() {
    batch_ = 0;
    free_count_ = args_.max_batch;
    free_slots_.resize(args_.max_batch);
    for (std::uint32_t i = 0; i < args_.max_batch; ++i) free_slots_[i] = args_.max_batch - 1 - i;
    // The device scheduler's initial page stack too (page 0 on top).
    free_pages_.resize(pages_.pool_pages);
    for (std::uint32_t i = 0; i < pages_.pool_pages; ++i)
      free_pages_[i] = pages_.pool_pages - 1 - i;
    pool_ = PagePool{free_pages_.data(), pages_.pool_pages, 0};
    pages_changed_ = true;
  }

  // A slot is free (and, paged, the pool covers `item`'s reserve).
  [[nodiscard]] bool CanAdmit(const WorkItem& item = {}) const {
    return batch_ < args_.max_batch && free_count_ > 0 &&
           (!pages_.paged() || PoolAdmits(pages_, pool_, item));
  }
  // Admits `item` at the end of the batch (requires CanAdmit(item)).
  void Admit(const WorkItem& item) {
    if (pages_.paged()) pool_.reserved += ItemPageReserve(pages_, item);
    batch_ = AdmitItem(args_, batch_, free_slots_.data(), free_count_, item);
  }
  // Retires the finished positions, calling retired(p) for each first (and
  // releasing their pages).
  template <class Retired>
  void Retire(Retired&& retired) {
    batch_ = RetireStep(args_, batch_, free_slots_.data(), free_count_, [&](std::uint32_t p) {
      retired(p);
      if (pages_.paged()) {
        ReleaseItemPages(pages_, args_, p, pool_);
        pages_changed_ = true;
      }
    });
  }
  // Plans the next step's tokens (and, paged, maps their pages); returns its
  // rows.
  std::uint32_t PlanTokens(const TokenPolicy& policy) {
    const std::uint32_t rows = PlanStepTokens(policy, args_, batch_);
    if (pages_.paged() && MapStepPages(pages_, args_, batch_, pool_) > 0) pages_changed_ = true;
    return rows;
  }

  // Paged: the host page table ([max_batch][pages_per_slot]), the pool, and
  // whether the table changed since the last TakePagesChanged().
  [[nodiscard]] const std::vector<std::uint32_t>& page_table() const { return table_; }
  [[nodiscard]] const PagePool& page_pool() const { return pool_; }
  bool TakePagesChanged() {
    const bool changed = pages_changed_;
    pages_changed_ = false;
    return changed;
  }

  [[nodiscard]] const StepArgs& args() const { return args_; }
  [[nodiscard]] std::uint32_t batch() const { return batch_; }
  [[nodiscard]] std::uint32_t free_count() const { return free_count_; }
  // The free stack's slots, bottom first: [0, free_count()).
  [[nodiscard]] const std::vector<std::uint32_t>& free_slots() const { return free_slots_; }

 private:
  void SetPages(const PagePolicy& pages) {
    pages_ = pages;
    table_.assign(std::size_t{pages.pages_per_slot} * args_.max_batch, kNoPage);
    pages_.page_table = table_.data();
    Reset();
  }

  std::vector<WorkItem> items_;       // owned arrays (empty over the caller's)
  std::vector<std::uint32_t> words_;  // [kStepWords][max_batch]
  std::vector<std::uint32_t> free_slots_;
  StepArgs args_;
  PagePolicy pages_;  // its page_table points at table_
  std::vector<std::uint32_t> table_;
  std::vector<std::uint32_t> free_pages_;
  PagePool pool_;
  bool pages_changed_ = false;
  std::uint32_t batch_ = 0;
  std::uint32_t free_count_ = 0;
};

}  // namespace baton
