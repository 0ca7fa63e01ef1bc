// The scheduler's private bookkeeping of the active batch, beside the public
// StepArgs arrays: how many positions are active and which stable slots are
// free. Invariant: batch + free_count == max_batch. Abseil-free.
#pragma once

#include <cstdint>

#include "baton/completion.h"
#include "baton/work_item.h"

namespace baton::detail {

struct BatchCounts {
  std::uint32_t batch = 0;       // active positions [0, batch)
  std::uint32_t free_count = 0;  // entries of free_slots in use
  std::uint32_t rows = 0;        // the decided step's rows (StepHeader::tokens), kept here
                                 // because a multi-step graph may empty the header
  std::uint32_t pad = 0;
  // Paged programs (baton/page_policy.h): the page pool and the items taken
  // from the queue that wait for it (held, in queue order, admitted first).
  std::uint32_t free_pages = 0;      // entries of BatchBook::free_pages in use
  std::uint32_t reserved_pages = 0;  // pages the admitted items reserve
  std::uint32_t held = 0;            // entries of BatchBook::held in use (<= kHeldItems)
  std::uint32_t pad2 = 0;
};

// One pop's worth: the decision pops again only once nothing is held.
inline constexpr std::uint32_t kHeldItems = 32;

// Device pointers, passed by value.
struct BatchBook {
  BatchCounts* counts = nullptr;
  std::uint32_t* free_slots = nullptr;  // [max_batch] stack of unused slots
  Completion* retired = nullptr;        // [max_batch] one step's completions
  std::uint32_t* free_pages = nullptr;  // paged: [pool_pages] stack of unused pages
  WorkItem* held = nullptr;             // paged: [kHeldItems]
};

}  // namespace baton::detail
