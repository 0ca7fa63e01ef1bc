// What a step program's kernels read and write. The scheduler fills these
// device arrays before every step; the step's kernels (captured once into the
// bucket graphs, with these pointers baked in) read the active batch from them
// and mark the items they finish. No Abseil: .cu files include it.
//
// The batch is compacted: positions [0, header->batch) are active, in
// admission order. An item keeps its `slot` (a stable index in
// [0, max_batch), e.g. its KV-cache row) for its whole life, while its
// position may move down as items before it retire.
//
// Tokens. A step serves a token budget (baton/batch_policy.h): position p
// runs tokens[p] tokens this step, rows [token_offsets[p], token_offsets[p] +
// tokens[p]) of the step's header->tokens rows, in position order. An item
// still reading its input (a prompt) gets a chunk of it, a decoding item one
// token, and an item may get none in a step whose budget the others used up.
// A program without a token budget gets one token per active item:
// tokens[p] = 1, token_offsets[p] = p, header->tokens = header->batch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton/config.h"
#include "baton/work_item.h"

namespace baton {

// The step about to run.
struct StepHeader {
  unsigned long long step = 0;    // index of this step since the runtime started
  std::uint32_t batch = 0;        // active items (positions)
  std::uint32_t bucket = 0;       // index of the bucket graph that runs it
  std::uint32_t bucket_size = 0;  // that bucket's capacity: rows (>= tokens and >= batch)
  std::uint32_t tokens = 0;       // rows this step: the sum of tokens[p] over the batch
  std::uint32_t reserved[2] = {};
};
static_assert(sizeof(StepHeader) == 32, "the header is one 32-byte record");

// Device pointers, passed by value into a step program's kernels.
struct StepArgs {
  StepHeader* header = nullptr;
  WorkItem* items = nullptr;               // [max_batch] the item at each position
  std::uint32_t* slots = nullptr;          // [max_batch] the item's stable slot
  std::uint32_t* item_steps = nullptr;     // [max_batch] steps the item ran before this one
  std::uint32_t* item_tokens = nullptr;    // [max_batch] tokens the item ran before this one
  std::uint32_t* tokens = nullptr;         // [max_batch] tokens the item runs this step (may be 0)
  std::uint32_t* token_offsets = nullptr;  // [max_batch] its first row this step
  std::uint32_t* finished = nullptr;       // [max_batch] set by finish_item: retire after this step
  std::uint32_t* results = nullptr;        // [max_batch] reported in the item's Completion
  std::uint32_t max_batch = 0;
  std::uint32_t max_tokens = 0;  // rows one step may hold (the token budget; max_batch without)
};

// The batch's word arrays (slots .. results) kept as one buffer of
// kStepWords arrays of max_batch words, in StepArgs' order.
inline constexpr std::uint32_t kStepWords = 7;

// Points args' word arrays into `words` ([kStepWords][args.max_batch]).
BATON_HOST_DEVICE inline void PointStepWords(StepArgs& args, std::uint32_t* words) {
  const std::size_t n = args.max_batch;
  args.slots = words;
  args.item_steps = words + n;
  args.item_tokens = words + 2 * n;
  args.tokens = words + 3 * n;
  args.token_offsets = words + 4 * n;
  args.finished = words + 5 * n;
  args.results = words + 6 * n;
}

// For a step kernel: the item at `position` is done after this step; `value`
// travels to the host in its Completion. Items not finished run again next
// step (results[] is read only for finished items).
BATON_HOST_DEVICE inline void finish_item(const StepArgs& args, std::uint32_t position,
                                          std::uint32_t value) {
  args.results[position] = value;
  args.finished[position] = 1;
}

}  // namespace baton
