// Warp-parallel batch bookkeeping for the scheduler: the batch policy of
// baton/batch_policy.h (the scalar reference these are tested against,
// batch_ops_gpu_test.cc) run by one warp. Collect the items the last step
// finished, compact the survivors, admit new items, plan the next step's
// tokens. Each function is called by all 32 lanes of one warp (the
// scheduler's warp 0) and touches positions 32 at a time, so a step of batch
// B costs B/32 rounds, not B.
#pragma once

#include <cstdint>

#include "baton/batch_policy.h"
#include "baton/step_args.h"
#include "scheduler/batch_book.h"

namespace baton::detail {

inline constexpr unsigned kFullWarp = 0xffffffffu;

[[nodiscard]] __device__ inline unsigned lane_id() { return threadIdx.x & 31u; }
[[nodiscard]] __device__ inline unsigned lanes_below(unsigned mask) {
  return __popc(mask & ((1u << lane_id()) - 1u));
}

// Inclusive sum over the warp's lanes, in lane order.
[[nodiscard]] __device__ inline std::uint32_t warp_inclusive_sum(std::uint32_t v) {
#pragma unroll
  for (unsigned d = 1; d < 32; d *= 2) {
    const std::uint32_t other = __shfl_up_sync(kFullWarp, v, d);
    if (lane_id() >= d) v += other;
  }
  return v;
}

// Positions [0, 32) of what the last step left, loaded by the scheduler
// together with its other first loads: for a batch of up to 32 (the usual
// decode batch) retiring, advancing and planning the next step's tokens then
// need no dependent round trip to L2. Lanes at or past max_batch hold 0.
struct FirstRound {
  std::uint32_t finished = 0;
  std::uint32_t item_steps = 0;
  std::uint32_t item_tokens = 0;  // before the last step
  std::uint32_t tokens = 0;       // the last step's
  std::uint32_t input = 0;        // InputTokens of the item
};

[[nodiscard]] __device__ inline FirstRound load_first_round(const StepArgs& args) {
  FirstRound round;
  const unsigned lane = lane_id();
  if (lane < args.max_batch) {
    round.finished = args.finished[lane];
    round.item_steps = args.item_steps[lane];
    round.item_tokens = args.item_tokens[lane];
    round.tokens = args.tokens[lane];
    round.input = InputTokens(args.items[lane]);
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
// [0, survivors) in order, with one more step and their tokens counted.
// Returns survivors.
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
    std::uint32_t slot = 0, steps = 0, ran = 0;
    if (active) {
      item = args.items[position];
      slot = args.slots[position];
      steps = args.item_steps[position];
      ran = args.item_tokens[position] + args.tokens[position];
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
      args.item_tokens[to] = ran;
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
// more step and the tokens it ran. The cheap path of warp_compact.
__device__ inline void warp_advance(const StepArgs& args, std::uint32_t batch,
                                    const FirstRound& first) {
  const unsigned lane = lane_id();
  if (lane < batch) {
    args.item_steps[lane] = first.item_steps + 1;
    args.item_tokens[lane] = first.item_tokens + first.tokens;
  }
  for (std::uint32_t position = lane + 32; position < batch; position += 32) {
    args.item_steps[position] += 1;
    args.item_tokens[position] += args.tokens[position];
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
    args.item_tokens[position] = 0;
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

// What the token plan needs of position lane_id(): its input and the tokens
// it already ran. The decision knows them in registers for a batch within
// the first 32 positions whose survivors did not move (nothing retired):
// `known` says so; otherwise warp_plan_tokens loads them.
struct PlanLane {
  bool known = false;
  std::uint32_t input = 0;
  std::uint32_t ran = 0;
};

// PlanStepTokens (baton/batch_policy.h) for positions [0, batch): writes
// tokens[] and token_offsets[] and returns the step's rows. `first_tokens`:
// the tokens of position lane_id() (round 0), for the paging's shortcut.
__device__ inline std::uint32_t warp_plan_tokens(const TokenPolicy& policy, const StepArgs& args,
                                                 std::uint32_t batch, const PlanLane& hint,
                                                 std::uint32_t& first_tokens) {
  const unsigned lane = lane_id();
  first_tokens = lane < batch ? 1 : 0;
  if (!policy.budgeted()) {
    for (std::uint32_t p = lane; p < batch; p += 32) {
      args.tokens[p] = 1;
      args.token_offsets[p] = p;
    }
    __syncwarp();
    return batch;
  }
  // Position p's (input, ran) in lane p % 32 of round p / 32.
  const auto lane_state = [&](std::uint32_t base, std::uint32_t& input, std::uint32_t& ran) {
    const std::uint32_t p = base + lane;
    if (p >= batch) {
      input = ran = 0;
    } else if (base == 0 && hint.known) {
      input = hint.input;
      ran = hint.ran;
    } else {
      input = InputTokens(args.items[p]);
      ran = args.item_tokens[p];
    }
  };
  std::uint32_t input0 = 0, ran0 = 0;  // round 0, kept for the second pass
  std::uint32_t decoding_count = 0;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    std::uint32_t input, ran;
    lane_state(base, input, ran);
    if (base == 0) input0 = input, ran0 = ran;
    const bool live = base + lane < batch;
    decoding_count += __popc(__ballot_sync(kFullWarp, live && Decoding(policy, input, ran)));
  }
  const std::uint32_t budget = StepTokenBudget(policy, decoding_count);
  std::uint32_t left = budget > decoding_count ? budget - decoding_count : 0;
  std::uint32_t rows = 0;
  for (std::uint32_t base = 0; base < batch; base += 32) {
    std::uint32_t input = input0, ran = ran0;
    if (base != 0) lane_state(base, input, ran);
    const std::uint32_t p = base + lane;
    const bool live = p < batch;
    const bool decoding = Decoding(policy, input, ran);
    const std::uint32_t wanted = TokensWanted(policy, budget, input, ran);
    const std::uint32_t want = live && !decoding ? wanted : 0;
    // Earlier reading positions took min(their wants, the budget) in all.
    const std::uint32_t wanted_before = warp_inclusive_sum(want) - want;
    const std::uint32_t left_here = wanted_before < left ? left - wanted_before : 0;
    const std::uint32_t n = !live ? 0 : decoding ? 1 : (want < left_here ? want : left_here);
    const std::uint32_t through = warp_inclusive_sum(n);
    if (live) {
      args.tokens[p] = n;
      args.token_offsets[p] = rows + through - n;
    }
    if (base == 0) first_tokens = n;
    const std::uint32_t round_want = __shfl_sync(kFullWarp, wanted_before + want, 31);
    left = round_want < left ? left - round_want : 0;
    rows += __shfl_sync(kFullWarp, through, 31);
  }
  __syncwarp();
  return rows;
}
__device__ inline std::uint32_t warp_plan_tokens(const TokenPolicy& policy, const StepArgs& args,
                                                 std::uint32_t batch, const PlanLane& hint) {
  std::uint32_t first_tokens = 0;
  return warp_plan_tokens(policy, args, batch, hint, first_tokens);
}

}  // namespace baton::detail
