// What a lockstep record (scheduler/lockstep_channel.h) carries from the
// leader's scheduler to its followers: everything a follower's step reads
// that the leader decided, so that every rank runs the same step on the
// same rows and pages (docs/DESIGN.md, "Collectives between the GPUs of a
// host"). The scalar reference, host and device; a warp version will be
// tested against it, as the batch policy's is.
//
// Layout, in 32-bit words:
//   [0]          the command (LockstepCommand: run the step, park, stop)
//   [1]          the record's length in words (a follower copies that many
//                from the leader's memory, a warp at a time, then unpacks
//                its local copy)
//   [2, 10)      the StepHeader (32 bytes)
//   then per position p < header.batch, in order:
//     the WorkItem (4 words), slot, item_steps, item_tokens, tokens,
//     token_offsets, n, then the n pool pages the leader mapped for p this
//     step: the entries of p's StepPages (baton/page_policy.h), the span
//     MapStepPages fills.
// A follower writes the header, the arrays and those entries into its own
// StepArgs and page table; `finished` and `results` are not carried (each
// rank's step end computes the same ones). Entries a position held before
// the step were carried by earlier records, so a row is whole on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "baton/config.h"
#include "baton/page_policy.h"
#include "baton/step_args.h"
#include "baton/work_item.h"

namespace baton::detail {

enum class LockstepCommand : std::uint32_t { kStep = 1, kPark = 2, kStop = 3 };

inline constexpr std::size_t kLockstepRecordHead = 2 + sizeof(StepHeader) / 4;
inline constexpr std::size_t kLockstepPositionWords = sizeof(WorkItem) / 4 + 6;
static_assert(sizeof(StepHeader) % 4 == 0 && sizeof(WorkItem) % 4 == 0, "records are words");

// Words a record of a program needs at most: the head, every position's
// fixed words, and the pages one step can map (each position's tokens over
// the page size, rounded up: at most max_tokens / page_tokens + max_batch).
[[nodiscard]] BATON_HOST_DEVICE constexpr std::size_t lockstep_record_words(
    std::uint32_t max_batch, std::uint32_t max_tokens, const PagePolicy& pages) {
  const std::size_t mapped = pages.paged() ? max_tokens / pages.page_tokens + max_batch : 0;
  return kLockstepRecordHead + std::size_t{max_batch} * kLockstepPositionWords + mapped;
}

// Writes the record of the step `a` describes (after the leader's scheduler
// wrote it and mapped its pages) into `words`. Returns the words written,
// or 0 where they would pass `capacity` (nothing past it is written).
[[nodiscard]] BATON_HOST_DEVICE inline std::size_t pack_lockstep_record(LockstepCommand command,
                                                                        const StepArgs& a,
                                                                        const PagePolicy& pages,
                                                                        std::uint32_t* words,
                                                                        std::size_t capacity) {
  if (capacity < kLockstepRecordHead) return 0;
  words[0] = static_cast<std::uint32_t>(command);
  memcpy(words + 2, a.header, sizeof(StepHeader));
  std::size_t at = kLockstepRecordHead;
  const std::uint32_t batch = command == LockstepCommand::kStep ? a.header->batch : 0;
  for (std::uint32_t p = 0; p < batch; ++p) {
    const StepPageSpan span = pages.paged() ? StepPages(pages, a, p) : StepPageSpan{};
    const std::uint32_t n = span.end > span.first ? span.end - span.first : 0;
    if (capacity - at < kLockstepPositionWords + n) return 0;
    memcpy(words + at, &a.items[p], sizeof(WorkItem));
    at += sizeof(WorkItem) / 4;
    words[at++] = a.slots[p];
    words[at++] = a.item_steps[p];
    words[at++] = a.item_tokens[p];
    words[at++] = a.tokens[p];
    words[at++] = a.token_offsets[p];
    words[at++] = n;
    const std::uint32_t* row = pages.page_table + std::size_t{a.slots[p]} * pages.pages_per_slot;
    for (std::uint32_t j = 0; j < n; ++j) words[at++] = row[span.first + j];
  }
  words[1] = static_cast<std::uint32_t>(at);
  return at;
}

// A follower's side: the record in `words` (at most `used` of them readable:
// the record's own length word is checked against it) into its own StepArgs
// (header and the positions' arrays) and page table. Returns the command. A record whose
// slots or pages would index past the follower's arrays is refused
// (returns 0; positions before the bad one may have been written): records
// come from a rank of the same program, so that only happens to corrupted
// memory, which must not become a wild write; the caller faults.
[[nodiscard]] BATON_HOST_DEVICE inline std::uint32_t unpack_lockstep_record(
    const std::uint32_t* words, std::size_t used, StepArgs& a, const PagePolicy& pages) {
  if (used < kLockstepRecordHead || words[1] < kLockstepRecordHead || words[1] > used) return 0;
  used = words[1];
  const std::uint32_t command = words[0];
  StepHeader header;
  memcpy(static_cast<void*>(&header), words + 2, sizeof(StepHeader));
  const std::uint32_t batch =
      command == static_cast<std::uint32_t>(LockstepCommand::kStep) ? header.batch : 0;
  if (batch > a.max_batch) return 0;
  std::size_t at = kLockstepRecordHead;
  for (std::uint32_t p = 0; p < batch; ++p) {
    if (used - at < kLockstepPositionWords) return 0;
    WorkItem item;
    memcpy(static_cast<void*>(&item), words + at, sizeof(WorkItem));
    at += sizeof(WorkItem) / 4;
    const std::uint32_t slot = words[at], item_tokens = words[at + 2], n = words[at + 5];
    const std::uint32_t have = pages.paged() ? HeldPages(pages, item, item_tokens) : 0;
    if (slot >= a.max_batch || used - at - 6 < n ||
        (n > 0 && (!pages.paged() || have + std::size_t{n} > pages.pages_per_slot))) {
      return 0;
    }
    a.items[p] = item;
    a.slots[p] = slot;
    a.item_steps[p] = words[at + 1];
    a.item_tokens[p] = item_tokens;
    a.tokens[p] = words[at + 3];
    a.token_offsets[p] = words[at + 4];
    at += 6;
    std::uint32_t* row =
        pages.paged() ? pages.page_table + std::size_t{slot} * pages.pages_per_slot : nullptr;
    for (std::uint32_t j = 0; j < n; ++j) row[have + j] = words[at++];
  }
  *a.header = header;
  return command;
}

}  // namespace baton::detail
