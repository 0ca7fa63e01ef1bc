// Warp-parallel batch bookkeeping for the scheduler: collect the items the
// last step finished, compact the survivors, admit new items. Each function is
// called by all 32 lanes of one warp (the scheduler's warp 0) and touches
// positions 32 at a time, so a step of batch B costs B/32 rounds, not B.
#pragma once

#include <cstdint>

#include "baton/step_args.h"
#include "scheduler/batch_book.h"

namespace baton::detail {

inline constexpr unsigned kFullWarp = 0xffffffffu;

[[nodiscard]] __device__ inline unsigned lane_id() { return threadIdx.x & 31u; }
[[nodiscard]] __device__ inline unsigned lanes_below(unsigned mask) {
  return __popc(mask & ((1u << lane_id()) - 1u));
}

// Positions [0, 32) of the step's finished flags and step counts, loaded by
// the scheduler together with its other first loads: for a batch of up to 32
// (the usual decode batch) retiring and advancing then need no dependent
// round trip to L2. Lanes at or past max_batch hold 0.
struct FirstRound {
  std::uint32_t finished = 0;
  std::uint32_t item_steps = 0;
};

[[nodiscard]] __device__ inline FirstRound load_first_round(const StepArgs& args) {
  FirstRound round;
  const unsigned lane = lane_id();
  if (lane < args.max_batch) {
    round.finished = args.finished[lane];
    round.item_steps = args.item_steps[lane];
  }
  return round;
}

// Writes a Completion for every finished position in [0, batch) into
// book.retired, in position order; returns how many. Changes nothing else, so
// the caller can still back out (e.g. when the mailbox is full).
[[nodiscard]] __device__ inline std::uint32_t warp_collect_retired(const StepArgs& args,
                                                                   const BatchBook& book,
                                                                   std::uint32_t batch,
                                                                   const FirstRound& first) {
  std::uint32_t count = 0;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    const std::uint32_t position = base + lane_id();
    const bool live = position < batch;
    const bool done = live && (base == 0 ? first.finished : args.finished[position]) != 0;
    const unsigned mask = __ballot_sync(kFullWarp, done);
    if (done) {
      Completion& c = book.retired[count + lanes_below(mask)];
      c.id = args.items[position].id;
      c.status = static_cast<std::uint32_t>(CompletionStatus::kCompleted);
      c.steps = (base == 0 ? first.item_steps : args.item_steps[position]) + 1;
      c.value = args.results[position];
    }
    count += __popc(mask);
  }
  return count;
}

// After a step: finished items give their slots back; survivors move down to
// [0, survivors) in order, with one more step counted. Returns survivors.
__device__ inline std::uint32_t warp_compact(const StepArgs& args, const BatchBook& book,
                                             std::uint32_t batch) {
  std::uint32_t kept = 0;
  std::uint32_t free_count = book.counts->free_count;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    const std::uint32_t position = base + lane_id();
    const bool active = position < batch;
    const bool done = active && args.finished[position] != 0;
    const bool keep = active && !done;
    WorkItem item;
    std::uint32_t slot = 0, steps = 0;
    if (active) {
      item = args.items[position];
      slot = args.slots[position];
      steps = args.item_steps[position];
    }
    const unsigned keep_mask = __ballot_sync(kFullWarp, keep);
    const unsigned done_mask = __ballot_sync(kFullWarp, done);
    // Every lane has read its position before any lane writes: writes go to
    // positions <= base + 31 that this round already read, or below base.
    __syncwarp();
    if (keep) {
      const std::uint32_t to = kept + lanes_below(keep_mask);
      args.items[to] = item;
      args.slots[to] = slot;
      args.item_steps[to] = steps + 1;
      args.finished[to] = 0;
    }
    if (done) book.free_slots[free_count + lanes_below(done_mask)] = slot;
    kept += __popc(keep_mask);
    free_count += __popc(done_mask);
  }
  __syncwarp();
  if (lane_id() == 0) {
    book.counts->batch = kept;
    book.counts->free_count = free_count;
  }
  __syncwarp();
  return kept;
}

// After a step in which nothing finished: positions stay, each item counts one
// more step. The cheap path of warp_compact.
__device__ inline void warp_advance(const StepArgs& args, std::uint32_t batch,
                                    const FirstRound& first) {
  const unsigned lane = lane_id();
  if (lane < batch) args.item_steps[lane] = first.item_steps + 1;
  for (std::uint32_t position = lane + 32; position < batch; position += 32) {
    args.item_steps[position] += 1;
  }
  __syncwarp();
}

// Admits the lanes' `valid` items at positions [batch, batch + n), taking
// slots from the free stack. The caller never offers more than free_count.
// Returns the new batch.
__device__ inline std::uint32_t warp_admit(const StepArgs& args, const BatchBook& book,
                                           std::uint32_t batch, const WorkItem& item, bool valid) {
  const unsigned mask = __ballot_sync(kFullWarp, valid);
  const std::uint32_t free_count = book.counts->free_count;
  if (valid) {
    const std::uint32_t rank = lanes_below(mask);
    const std::uint32_t position = batch + rank;
    args.items[position] = item;
    args.slots[position] = book.free_slots[free_count - 1 - rank];
    args.item_steps[position] = 0;
    args.finished[position] = 0;
  }
  const std::uint32_t n = __popc(mask);
  __syncwarp();
  if (lane_id() == 0) {
    book.counts->batch = batch + n;
    book.counts->free_count = free_count - n;
  }
  __syncwarp();
  return batch + n;
}

}  // namespace baton::detail
