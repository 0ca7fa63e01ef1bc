// The lockstep record (src/scheduler/lockstep_record.h) on the host: a
// leader runs the real paging policy (MapStepPages, ReleaseItemPages) over
// a random schedule of admissions, growth and retirements for 3,000 steps,
// packing each step into a record; a follower that sees only the records
// must hold the leader's header, positions and page-table rows after every
// step. Also: the size bound holds near its worst case, a record that does not
// fit is refused, and a corrupted record never writes past the follower's
// arrays.
#include "scheduler/lockstep_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

namespace baton::detail {
namespace {

constexpr std::uint32_t kMaxBatch = 8;
constexpr std::uint32_t kMaxTokens = 96;  // the step's token budget
constexpr std::uint32_t kPageTokens = 16;
constexpr std::uint32_t kPagesPerSlot = 64;
constexpr std::uint32_t kPoolPages = 256;

// One rank's step arguments and page table.
struct Rank {
  StepHeader header;
  std::vector<WorkItem> items = std::vector<WorkItem>(kMaxBatch);
  std::vector<std::uint32_t> words = std::vector<std::uint32_t>(kStepWords * kMaxBatch);
  std::vector<std::uint32_t> table;
  StepArgs args;
  PagePolicy pages;

  explicit Rank(std::uint32_t poison) : table(kMaxBatch * kPagesPerSlot, poison) {
    std::fill(words.begin(), words.end(), poison);
    args.header = &header;
    args.items = items.data();
    args.max_batch = kMaxBatch;
    args.max_tokens = kMaxTokens;
    PointStepWords(args, words.data());
    pages.page_tokens = kPageTokens;
    pages.pool_pages = kPoolPages;
    pages.pages_per_slot = kPagesPerSlot;
    pages.page_table = table.data();
  }
};

TEST(LockstepRecord, AFollowerOfRecordsHoldsTheLeadersStepAndPages) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  Rank leader(0u), follower(0xDEADBEEFu);
  std::vector<std::uint32_t> free_pages(kPoolPages);
  std::iota(free_pages.begin(), free_pages.end(), 0u);
  std::shuffle(free_pages.begin(), free_pages.end(), rng);
  PagePool pool{free_pages.data(), kPoolPages, 0};
  const std::size_t capacity = lockstep_record_words(kMaxBatch, kMaxTokens, leader.pages);
  std::vector<std::uint32_t> record(capacity);

  // The leader's running items: slot, item, tokens so far, steps so far.
  struct Running {
    std::uint32_t slot;
    WorkItem item;
    std::uint32_t tokens, steps;
  };
  std::vector<Running> running;
  std::vector<std::uint32_t> free_slots(kMaxBatch);
  std::iota(free_slots.begin(), free_slots.end(), 0u);
  std::uint32_t next_id = 0;
  std::uint64_t mapped_total = 0;
  for (unsigned long long step = 1; step <= 3000; ++step) {
    // Admit while a slot is free and the pool covers the reserve.
    while (!free_slots.empty() && rng() % 3 != 0) {
      const std::uint32_t bound = 1 + static_cast<std::uint32_t>(rng() % 700);
      const WorkItem item = WorkItem::make(1, next_id, std::uint64_t{bound} << 32);
      if (!PoolAdmits(leader.pages, pool, item)) break;
      pool.reserved += ItemPageReserve(leader.pages, item);
      running.push_back({free_slots.back(), item, 0, 0});
      free_slots.pop_back();
      ++next_id;
    }
    std::shuffle(running.begin(), running.end(), rng);  // positions in any order
    // The step: every running item a position, tokens within the budget.
    const std::uint32_t batch = static_cast<std::uint32_t>(running.size());
    std::uint32_t budget = kMaxTokens, offset = 0;
    for (std::uint32_t p = 0; p < batch; ++p) {
      const Running& r = running[p];
      const std::uint32_t room = ItemTokenBound(r.item) - r.tokens;
      const std::uint32_t t = std::min({room, budget, static_cast<std::uint32_t>(rng() % 40)});
      leader.items[p] = r.item;
      leader.args.slots[p] = r.slot;
      leader.args.item_steps[p] = r.steps;
      leader.args.item_tokens[p] = r.tokens;
      leader.args.tokens[p] = t;
      leader.args.token_offsets[p] = offset;
      offset += t;
      budget -= t;
    }
    leader.header =
        StepHeader{step, batch, static_cast<std::uint32_t>(rng() % 5), kMaxTokens, offset, {}};
    mapped_total += MapStepPages(leader.pages, leader.args, batch, pool);

    const std::size_t used = pack_lockstep_record(LockstepCommand::kStep, leader.args, leader.pages,
                                                  record.data(), capacity);
    ASSERT_GT(used, 0u) << "step " << step << ": the bound did not hold";
    ASSERT_EQ(record[1], used) << "the record's length word";
    ASSERT_EQ(unpack_lockstep_record(record.data(), used, follower.args, follower.pages),
              static_cast<std::uint32_t>(LockstepCommand::kStep));

    ASSERT_EQ(std::memcmp(&follower.header, &leader.header, sizeof(StepHeader)), 0)
        << "step " << step;
    for (std::uint32_t p = 0; p < batch; ++p) {
      ASSERT_EQ(follower.items[p].id, leader.items[p].id) << "step " << step << " position " << p;
      ASSERT_EQ(follower.items[p].payload, leader.items[p].payload);
      ASSERT_EQ(follower.args.slots[p], leader.args.slots[p]);
      ASSERT_EQ(follower.args.item_steps[p], leader.args.item_steps[p]);
      ASSERT_EQ(follower.args.item_tokens[p], leader.args.item_tokens[p]);
      ASSERT_EQ(follower.args.tokens[p], leader.args.tokens[p]);
      ASSERT_EQ(follower.args.token_offsets[p], leader.args.token_offsets[p]);
      // Every page the position holds after the step, on both ranks.
      const std::uint32_t held =
          HeldPages(leader.pages, leader.items[p],
                    std::uint64_t{leader.args.item_tokens[p]} + leader.args.tokens[p]);
      const std::size_t row = std::size_t{leader.args.slots[p]} * kPagesPerSlot;
      for (std::uint32_t j = 0; j < held; ++j) {
        ASSERT_EQ(follower.table[row + j], leader.table[row + j])
            << "step " << step << " slot " << leader.args.slots[p] << " page " << j;
      }
    }

    // After the step: items grow; some retire (their pages back on the stack).
    std::vector<Running> still;
    for (std::uint32_t p = 0; p < batch; ++p) {
      Running r = running[p];
      const bool done =
          r.tokens + leader.args.tokens[p] >= ItemTokenBound(r.item) || rng() % 9 == 0;
      if (done) {
        ReleaseItemPages(leader.pages, leader.args, p, pool);
        free_slots.push_back(r.slot);
      } else {
        r.tokens += leader.args.tokens[p];
        r.steps += 1;
        still.push_back(r);
      }
    }
    running = std::move(still);
  }
  EXPECT_GT(mapped_total, 1000u) << "the schedule mapped too few pages to test anything";
  EXPECT_GT(next_id, 100u) << "too few admissions";
}

TEST(LockstepRecord, TheBoundHoldsNearItsWorstCaseAndARecordPastItIsRefused) {
  Rank leader(0u);
  // Fresh positions (no tokens yet) map their tokens' pages, rounded up:
  // five of 17 tokens take 2 pages each, three of 3-4 tokens 1 each, 13 in
  // all for the 96-token budget, against the bound's 96 / 16 + 8 = 14.
  const std::uint32_t tokens[kMaxBatch] = {17, 17, 17, 17, 17, 4, 4, 3};
  std::uint32_t offset = 0;
  for (std::uint32_t p = 0; p < kMaxBatch; ++p) {
    leader.items[p] = WorkItem::make(1, p, std::uint64_t{kPagesPerSlot * kPageTokens} << 32);
    leader.args.slots[p] = p;
    leader.args.item_steps[p] = 0;
    leader.args.item_tokens[p] = 0;
    leader.args.tokens[p] = tokens[p];
    leader.args.token_offsets[p] = offset;
    offset += tokens[p];
  }
  ASSERT_EQ(offset, kMaxTokens);
  leader.header = StepHeader{7, kMaxBatch, 0, kMaxTokens, kMaxTokens, {}};
  const std::size_t capacity = lockstep_record_words(kMaxBatch, kMaxTokens, leader.pages);
  std::vector<std::uint32_t> record(capacity + 1, 0x5A5A5A5Au);
  const std::size_t used = pack_lockstep_record(LockstepCommand::kStep, leader.args, leader.pages,
                                                record.data(), capacity);
  ASSERT_GT(used, 0u);
  EXPECT_EQ(used, capacity - 1) << "13 pages against a bound of 14";
  EXPECT_EQ(record[capacity], 0x5A5A5A5Au) << "written past the capacity";
  // One word short of what this record needs: refused, nothing past it written.
  std::vector<std::uint32_t> small(used, 0x5A5A5A5Au);
  EXPECT_EQ(pack_lockstep_record(LockstepCommand::kStep, leader.args, leader.pages, small.data(),
                                 used - 1),
            0u);
  EXPECT_EQ(small[used - 1], 0x5A5A5A5Au);
  // A park record carries no positions.
  EXPECT_EQ(pack_lockstep_record(LockstepCommand::kPark, leader.args, leader.pages, record.data(),
                                 capacity),
            kLockstepRecordHead);
}

TEST(LockstepRecord, ACorruptedRecordIsRefusedWithoutAWildWrite) {
  Rank leader(0u), follower(0xDEADBEEFu);
  leader.items[0] = WorkItem::make(1, 0, std::uint64_t{64} << 32);
  leader.args.slots[0] = 3;
  leader.args.item_steps[0] = 0;
  leader.args.item_tokens[0] = 0;
  leader.args.tokens[0] = 40;
  leader.args.token_offsets[0] = 0;
  for (std::uint32_t j = 0; j < 3; ++j) leader.table[3 * kPagesPerSlot + j] = 100 + j;
  leader.header = StepHeader{1, 1, 0, kMaxTokens, 40, {}};
  std::vector<std::uint32_t> record(lockstep_record_words(kMaxBatch, kMaxTokens, leader.pages));
  const std::size_t used = pack_lockstep_record(LockstepCommand::kStep, leader.args, leader.pages,
                                                record.data(), record.size());
  ASSERT_EQ(used, kLockstepRecordHead + kLockstepPositionWords + 3);
  const std::size_t slot_word = kLockstepRecordHead + sizeof(WorkItem) / 4;
  const auto refused = [&](std::vector<std::uint32_t> bad, std::size_t n) {
    const std::vector<std::uint32_t> table = follower.table;
    const bool ok = unpack_lockstep_record(bad.data(), n, follower.args, follower.pages) == 0;
    return ok && follower.table == table;
  };
  auto bad = record;
  bad[slot_word] = kMaxBatch;  // a slot past the table
  EXPECT_TRUE(refused(bad, used));
  bad = record;
  bad[2 + 2] = kMaxBatch + 1;  // a batch past max_batch (the header's word 2: batch)
  EXPECT_TRUE(refused(bad, used));
  bad = record;
  bad[slot_word + 5] = kPagesPerSlot + 1;  // more pages than a row holds
  EXPECT_TRUE(refused(bad, used + kPagesPerSlot));
  EXPECT_TRUE(refused(record, used - 1)) << "a record longer than what may be read";
  bad = record;
  bad[1] = static_cast<std::uint32_t>(used - 1);  // a length word cut short
  EXPECT_TRUE(refused(bad, used));
  EXPECT_EQ(unpack_lockstep_record(record.data(), used, follower.args, follower.pages),
            static_cast<std::uint32_t>(LockstepCommand::kStep));
  EXPECT_EQ(follower.table[3 * kPagesPerSlot + 2], 102u);
}

}  // namespace
}  // namespace baton::detail
