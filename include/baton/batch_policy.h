// The batch policy, written once: what happens to the batch between two
// steps. Retire what the last step finished, admit queued items into free
// slots, give each position its tokens for the next step (chunks of the
// inputs still being read, one token for the others, within the step's
// token budget) and pick the bucket. These scalar functions are the
// reference: the device scheduler runs a warp-parallel version of the same
// rules (scheduler/batch_ops.cuh, tested against this one), and host-driven
// loops call these directly, so every driver admits, chunks and buckets
// alike. Host and device code; no Abseil.
//
// Rules:
//  - Retire: finished positions leave in position order (each slot pushed
//    on the free stack in that order); the others move down, keeping their
//    order, with one more step and the tokens they just ran counted.
//  - Admit: items join at the end of the batch in queue order, each taking
//    the slot on top of the free stack, while slots are free.
//  - Tokens (TokenPolicy): an item reads its input (InputTokens of its work
//    item) in chunks, then runs one token per step (it decodes). Decoding
//    items are served first, one token each; the rest of the budget goes to
//    the items still reading, in position (admission) order, each taking
//    min(what is left of its input, max_chunk_tokens, what is left of the
//    budget). Decodes first bound every decoding item's time between tokens
//    by one budget's worth of work; admission order finishes the oldest
//    prompt first, so its first token comes as early as the budget allows.
//    A step in which no item decodes delays nobody's next token: its budget
//    (and its chunk cap, when max_chunk_tokens leaves it to the budget) is
//    max_tokens_without_decodes, so prompts read alone take fewer, larger
//    steps (StepTokenBudget).
//  - Bucket: the smallest bucket holding both the step's rows and its
//    positions.
//  - Pages (a paged program, page_policy.h): admission also waits for the
//    pool to cover the head item's reserve; pages are mapped after the token
//    plan and released at retirement.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "baton/step_args.h"
#include "baton/work_item.h"

namespace baton {

// How a step program's steps are filled.
struct TokenPolicy {
  // Rows one step may hold. 0: no budget, every active item runs one token
  // per step (and work items' payloads mean nothing to the scheduler).
  // Otherwise at least the program's max_batch, so that every decoding item
  // always gets its token.
  std::uint32_t max_tokens_per_step = 0;
  // Most input tokens one item reads in one step (0: the step's budget). 1
  // feeds inputs a token per step.
  std::uint32_t max_chunk_tokens = 0;
  // Rows a step in which no item decodes may hold (at most
  // max_tokens_per_step, 0 included: max_tokens_per_step). Such a step only
  // reads inputs, so a larger one costs no decoding item any latency.
  std::uint32_t max_tokens_without_decodes = 0;

  [[nodiscard]] BATON_HOST_DEVICE constexpr bool budgeted() const {
    return max_tokens_per_step != 0;
  }
  // The most rows any step holds: what the largest bucket must hold.
  [[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t max_rows() const {
    return max_tokens_without_decodes > max_tokens_per_step ? max_tokens_without_decodes
                                                            : max_tokens_per_step;
  }
};

// The most rows a step of a program with `max_batch` items holds, what its
// largest bucket and its row arrays must hold: the budget's largest step,
// and at least one row per item (without a budget every item runs one).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t StepRowsLimit(const TokenPolicy& policy,
                                                                      std::uint32_t max_batch) {
  return policy.max_rows() > max_batch ? policy.max_rows() : max_batch;
}

// The budget of a step in which `decoding_count` items decode.
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t StepTokenBudget(
    const TokenPolicy& policy, std::uint32_t decoding_count) {
  return decoding_count == 0 ? policy.max_rows() : policy.max_tokens_per_step;
}

// The input an item reads before it produces its first output, under a token
// budget: the low 32 bits of its payload (at least 1). A decoder request's
// item carries its prompt length there (DecoderModel::WorkItemFor).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t InputTokens(const WorkItem& item) {
  const std::uint32_t n = static_cast<std::uint32_t>(item.payload & 0xffffffffu);
  return n == 0 ? 1 : n;
}

// Whether a position decodes (runs one token per step): without a budget
// always; with one, once it ran its whole input.
[[nodiscard]] BATON_HOST_DEVICE constexpr bool Decoding(const TokenPolicy& policy,
                                                        std::uint32_t input, std::uint32_t ran) {
  return !policy.budgeted() || ran >= input;
}

// The tokens a position asks for in a step of budget `budget`
// (StepTokenBudget), from its input and the tokens it already ran: 1 once it
// decodes, otherwise what is left of its input, capped at one chunk
// (max_chunk_tokens, or the budget).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t TokensWanted(const TokenPolicy& policy,
                                                                     std::uint32_t budget,
                                                                     std::uint32_t input,
                                                                     std::uint32_t ran) {
  if (Decoding(policy, input, ran)) return 1;
  const std::uint32_t left = input - ran;
  const std::uint32_t cap = policy.max_chunk_tokens != 0 && policy.max_chunk_tokens < budget
                                ? policy.max_chunk_tokens
                                : budget;
  return left < cap ? left : cap;
}

// Retire: calls retired(p) for every finished position p in [0, batch), in
// order, before anything moves (it reads args.items[p], item_steps[p],
// results[p]); pushes each one's slot on the free stack; compacts the others
// to [0, survivors) with item_steps + 1, item_tokens + tokens and finished
// cleared. Returns the survivors.
template <class Retired>
BATON_HOST_DEVICE std::uint32_t RetireStep(const StepArgs& a, std::uint32_t batch,
                                           std::uint32_t* free_slots, std::uint32_t& free_count,
                                           Retired&& retired) {
  std::uint32_t kept = 0;
  for (std::uint32_t p = 0; p < batch; ++p) {
    if (a.finished[p] != 0) {
      retired(p);
      free_slots[free_count++] = a.slots[p];
      continue;
    }
    a.items[kept] = a.items[p];
    a.slots[kept] = a.slots[p];
    a.item_steps[kept] = a.item_steps[p] + 1;
    a.item_tokens[kept] = a.item_tokens[p] + a.tokens[p];
    a.finished[kept] = 0;
    ++kept;
  }
  return kept;
}

// Admit: `item` joins at position `batch` with the slot on top of the free
// stack (the caller checks free_count > 0). Returns the new batch.
BATON_HOST_DEVICE inline std::uint32_t AdmitItem(const StepArgs& a, std::uint32_t batch,
                                                 const std::uint32_t* free_slots,
                                                 std::uint32_t& free_count, const WorkItem& item) {
  a.items[batch] = item;
  a.slots[batch] = free_slots[--free_count];
  a.item_steps[batch] = 0;
  a.item_tokens[batch] = 0;
  a.finished[batch] = 0;
  return batch + 1;
}

// Tokens: writes tokens[p] and token_offsets[p] for p in [0, batch) by the
// rules above; returns the step's rows.
BATON_HOST_DEVICE inline std::uint32_t PlanStepTokens(const TokenPolicy& policy, const StepArgs& a,
                                                      std::uint32_t batch) {
  std::uint32_t decoding_count = 0;
  for (std::uint32_t p = 0; p < batch; ++p) {
    decoding_count += Decoding(policy, InputTokens(a.items[p]), a.item_tokens[p]) ? 1 : 0;
  }
  // Without a budget every position decodes; with one, decodes never exceed
  // it (max_tokens_per_step >= max_batch).
  const std::uint32_t budget = StepTokenBudget(policy, decoding_count);
  std::uint32_t left = policy.budgeted() && budget > decoding_count ? budget - decoding_count : 0;
  std::uint32_t rows = 0;
  for (std::uint32_t p = 0; p < batch; ++p) {
    const std::uint32_t input = InputTokens(a.items[p]);
    std::uint32_t n = TokensWanted(policy, budget, input, a.item_tokens[p]);
    if (!Decoding(policy, input, a.item_tokens[p])) {
      n = n < left ? n : left;
      left -= n;
    }
    a.tokens[p] = n;
    a.token_offsets[p] = rows;
    rows += n;
  }
  return rows;
}

// What a step's bucket must hold: its rows, and a position for every item in
// the batch (an item may get no rows in a step whose budget others used up).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::uint32_t StepCapacityNeeded(std::uint32_t batch,
                                                                           std::uint32_t rows) {
  return rows > batch ? rows : batch;
}

// Bucket: the index of the smallest of `count` increasing sizes
// (size_at(i)) that holds `need`, or -1 when need is 0 (nothing to run) or
// larger than the largest. A binary search; every driver picks its buckets
// with it (the scheduler's decision through DeviceBucketTable, the host loops
// through ChooseStepBucket, the graph toolkit's BucketTable).
template <typename SizeAt>
[[nodiscard]] BATON_HOST_DEVICE constexpr int SmallestBucket(SizeAt size_at, std::uint32_t count,
                                                             std::uint32_t need) {
  if (need == 0 || count == 0 || size_at(count - 1) < need) return -1;
  std::uint32_t low = 0;
  std::uint32_t high = count - 1;
  while (low < high) {
    const std::uint32_t mid = low + (high - low) / 2;
    if (size_at(mid) >= need) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return static_cast<int>(low);
}

// The bucket of a step of `batch` positions and `rows` rows: the smallest of
// `sizes` (increasing) that holds StepCapacityNeeded(batch, rows), or -1.
[[nodiscard]] BATON_HOST_DEVICE inline int ChooseStepBucket(const std::uint32_t* sizes,
                                                            std::uint32_t count,
                                                            std::uint32_t batch,
                                                            std::uint32_t rows) {
  return SmallestBucket([sizes](std::uint32_t i) { return sizes[i]; }, count,
                        StepCapacityNeeded(batch, rows));
}

}  // namespace baton
