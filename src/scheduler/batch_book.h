// The scheduler's private bookkeeping of the active batch, beside the public
// StepArgs arrays: how many positions are active and which stable slots are
// free. Invariant: batch + free_count == max_batch. Abseil-free.
#pragma once

#include <cstdint>

#include "baton/completion.h"

namespace baton::detail {

struct BatchCounts {
  std::uint32_t batch = 0;       // active positions [0, batch)
  std::uint32_t free_count = 0;  // entries of free_slots in use
  std::uint32_t rows = 0;        // the decided step's rows (StepHeader::tokens), kept here
                                 // because a multi-step graph may empty the header
  std::uint32_t pad = 0;
};

// Device pointers, passed by value.
struct BatchBook {
  BatchCounts* counts = nullptr;
  std::uint32_t* free_slots = nullptr;  // [max_batch] stack of unused slots
  Completion* retired = nullptr;        // [max_batch] one step's completions
};

}  // namespace baton::detail
