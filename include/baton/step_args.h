// What a step program's kernels read and write. The scheduler fills these
// device arrays before every step; the step's kernels (captured once into the
// bucket graphs, with these pointers baked in) read the active batch from them
// and mark the items they finish. No Abseil: .cu files include it.
//
// The batch is compacted: positions [0, header->batch) are active, in
// admission order. An item keeps its `slot` (a stable index in
// [0, max_batch), e.g. its KV-cache row) for its whole life, while its
// position may move down as items before it retire.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "baton/work_item.h"

namespace baton {

// The step about to run.
struct StepHeader {
  unsigned long long step = 0;    // index of this step since the runtime started
  std::uint32_t batch = 0;        // active items
  std::uint32_t bucket = 0;       // index of the bucket graph that runs it
  std::uint32_t bucket_size = 0;  // that bucket's capacity (>= batch)
  std::uint32_t reserved[3] = {};
};

// Device pointers, passed by value into a step program's kernels.
struct StepArgs {
  StepHeader* header = nullptr;
  WorkItem* items = nullptr;            // [max_batch] the item at each position
  std::uint32_t* slots = nullptr;       // [max_batch] the item's stable slot
  std::uint32_t* item_steps = nullptr;  // [max_batch] steps the item ran before this one
  std::uint32_t* finished = nullptr;    // [max_batch] set by finish_item: retire after this step
  std::uint32_t* results = nullptr;     // [max_batch] reported in the item's Completion
  std::uint32_t max_batch = 0;
};

// For a step kernel: the item at `position` is done after this step; `value`
// travels to the host in its Completion. Items not finished run again next
// step (results[] is read only for finished items).
BATON_HOST_DEVICE inline void finish_item(const StepArgs& args, std::uint32_t position,
                                          std::uint32_t value) {
  args.results[position] = value;
  args.finished[position] = 1;
}

}  // namespace baton
