// The paging policy's scalar reference (baton/page_policy.h) through
// HostBatch: worked examples of each rule (reserve at admission, the head
// waits and nothing passes it, map as items grow, release at retirement, a
// sequence ending exactly on a page boundary, pages reused after free), and
// random runs checked against the rules as the header states them: every
// page is free or held by exactly one item, an item holds
// PagesFor(its tokens) (used + less than one page), the reserves sum to the
// pool's reserved count, and the pool is whole again once the batch drains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "baton/host_batch.h"
#include "baton/page_policy.h"
#include "support/test_seed.h"

namespace baton {
namespace {

// An item reading `input` tokens that may hold `bound` tokens in all.
WorkItem Item(std::uint32_t id, std::uint32_t input, std::uint32_t bound) {
  return WorkItem::make(1, id, std::uint64_t{bound} << 32 | input);
}

PagePolicy Pages(std::uint32_t page_tokens, std::uint32_t pool, std::uint32_t per_slot) {
  return PagePolicy{page_tokens, pool, per_slot, nullptr};
}

// The pages slot `slot` holds, in page order.
std::vector<std::uint32_t> Row(const HostBatch& b, const PagePolicy& pages, std::uint32_t slot,
                               std::uint32_t count) {
  const auto& t = b.page_table();
  const auto first = t.begin() + std::size_t{slot} * pages.pages_per_slot;
  return {first, first + count};
}

// Runs one step: every position's planned tokens, then finishes those that
// reached their bound.
void RunStep(HostBatch& b) {
  const StepArgs& a = b.args();
  for (std::uint32_t p = 0; p < b.batch(); ++p) {
    a.finished[p] = a.item_tokens[p] + a.tokens[p] >= ItemTokenBound(a.items[p]) ? 1 : 0;
  }
  b.Retire([](std::uint32_t) {});
}

TEST(PagePolicyTest, ReservesAtAdmissionMapsAsItGrowsReleasesAtRetirement) {
  const PagePolicy pages = Pages(16, 8, 8);
  const TokenPolicy tokens{64, 0};
  HostBatch b(4, pages);
  const WorkItem a = Item(1, 20, 40);     // 3 pages
  const WorkItem big = Item(2, 5, 100);   // 7 pages: waits for a
  const WorkItem small = Item(3, 1, 16);  // 1 page: would fit, but may not pass big
  ASSERT_TRUE(b.CanAdmit(a));
  b.Admit(a);
  EXPECT_EQ(b.page_pool().reserved, 3u);
  EXPECT_FALSE(b.CanAdmit(big)) << "3 + 7 pages exceed the pool of 8";
  EXPECT_TRUE(b.CanAdmit(small)) << "the caller keeps queue order: small waits behind big";
  // The prompt's 20 tokens: two pages, the stack's top first (0, then 1).
  EXPECT_EQ(b.PlanTokens(tokens), 20u);
  EXPECT_EQ(Row(b, pages, b.args().slots[0], 2), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(b.page_pool().free_count, 6u);
  RunStep(b);
  // Decoding tokens 20..31 stay on page 1; token 32 takes page 2.
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(b.PlanTokens(tokens), 1u);
    EXPECT_EQ(b.page_pool().free_count, 6u) << "token " << 20 + i;
    RunStep(b);
  }
  b.PlanTokens(tokens);
  EXPECT_EQ(b.page_pool().free_count, 5u);
  EXPECT_EQ(Row(b, pages, b.args().slots[0], 3), (std::vector<std::uint32_t>{0, 1, 2}));
  RunStep(b);
  // Tokens 33..39, then it ends at its bound with three pages, which go
  // back on the stack in page order (2 on top), the reserve with them.
  while (b.batch() > 0) {
    b.PlanTokens(tokens);
    RunStep(b);
  }
  EXPECT_EQ(b.page_pool().free_count, 8u);
  EXPECT_EQ(b.page_pool().reserved, 0u);
  const auto& free = b.page_pool().free_pages;
  EXPECT_EQ(std::vector<std::uint32_t>(free + 5, free + 8), (std::vector<std::uint32_t>{0, 1, 2}));
  // Now big fits, and reuses the freed pages first: 2, then 1.
  ASSERT_TRUE(b.CanAdmit(big));
  b.Admit(big);
  b.PlanTokens(tokens);
  EXPECT_EQ(Row(b, pages, b.args().slots[0], 1), (std::vector<std::uint32_t>{2}));
}

TEST(PagePolicyTest, ASequenceEndingOnAPageBoundaryHoldsExactlyItsPages) {
  const PagePolicy pages = Pages(16, 4, 4);
  HostBatch b(1, pages);
  b.Admit(Item(1, 16, 32));  // its prompt fills page 0, its new tokens page 1
  std::uint32_t most = 0;
  while (b.batch() > 0) {
    b.PlanTokens(TokenPolicy{16, 0});
    most = std::max(most, 4 - b.page_pool().free_count);
    RunStep(b);
  }
  EXPECT_EQ(most, 2u) << "32 tokens in pages of 16: never a third page";
  EXPECT_EQ(b.page_pool().free_count, 4u);
}

TEST(PagePolicyTest, ReservesAreClampedToThePoolAndTheSlotRow) {
  const PagePolicy pages = Pages(16, 5, 3);
  EXPECT_EQ(ItemPageReserve(pages, Item(1, 1, 0)), 1u) << "a bound of 0 still reserves a page";
  EXPECT_EQ(ItemPageReserve(pages, Item(1, 1, 48)), 3u);
  EXPECT_EQ(ItemPageReserve(pages, Item(1, 1, 49)), 3u) << "a slot's row holds 3 pages";
  EXPECT_EQ(ItemPageReserve(Pages(16, 2, 8), Item(1, 1, 1000)), 2u) << "the pool holds 2";
  EXPECT_EQ(PagesFor(pages, 0), 0u);
  EXPECT_EQ(PagesFor(pages, 16), 1u);
  EXPECT_EQ(PagesFor(pages, 17), 2u);
}

TEST(PagePolicyTest, RandomRunsKeepEveryPageOnceAndReturnThePoolWhole) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()));
  const auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  for (int run = 0; run < 40; ++run) {
    const std::uint32_t page = 1u << uniform(0, 5);
    const std::uint32_t per_slot = uniform(1, 12);
    const std::uint32_t pool = uniform(per_slot, 3 * per_slot + 4);
    const std::uint32_t max_batch = uniform(1, 9);
    const PagePolicy pages = Pages(page, pool, per_slot);
    const TokenPolicy tokens{uniform(max_batch, 80), uniform(0, 1) ? 0 : uniform(1, 20)};
    HostBatch b(max_batch, pages);
    std::deque<WorkItem> queue;
    std::uint64_t demand = 0;
    for (std::uint32_t i = 0; i < 60; ++i) {
      const std::uint32_t bound = uniform(1, per_slot * page);
      queue.push_back(Item(i, uniform(1, bound), bound));
      demand += PagesFor(pages, bound);
    }
    SCOPED_TRACE(::testing::Message() << "run " << run << ": page " << page << ", pool " << pool
                                      << ", demand " << demand << " pages");
    std::uint32_t finished = 0;
    for (int step = 0; step < 100000 && (b.batch() > 0 || !queue.empty()); ++step) {
      while (!queue.empty() && b.CanAdmit(queue.front())) {
        b.Admit(queue.front());
        queue.pop_front();
      }
      ASSERT_GT(b.batch(), 0u) << "the head item fits an empty pool";
      b.PlanTokens(tokens);
      const StepArgs& a = b.args();
      std::vector<int> owner(pool, -1);
      std::uint32_t reserved = 0;
      for (std::uint32_t p = 0; p < b.batch(); ++p) {
        const std::uint32_t held = PagesFor(pages, a.item_tokens[p] + a.tokens[p]);
        reserved += PagesFor(pages, ItemTokenBound(a.items[p]));
        for (std::uint32_t page_id : Row(b, pages, a.slots[p], held)) {
          ASSERT_LT(page_id, pool);
          ASSERT_EQ(owner[page_id], -1) << "page " << page_id << " held twice";
          owner[page_id] = static_cast<int>(p);
        }
      }
      const PagePool& state = b.page_pool();
      for (std::uint32_t i = 0; i < state.free_count; ++i) {
        ASSERT_EQ(owner[state.free_pages[i]], -1) << "page " << state.free_pages[i];
        owner[state.free_pages[i]] = -2;
      }
      for (std::uint32_t i = 0; i < pool; ++i) ASSERT_NE(owner[i], -1) << "page " << i << " lost";
      ASSERT_EQ(state.reserved, reserved);
      ASSERT_LE(state.reserved, pool);
      const std::uint32_t before = b.batch();
      RunStep(b);
      finished += before - b.batch();
    }
    EXPECT_EQ(finished, 60u);
    EXPECT_EQ(b.page_pool().free_count, pool);
    EXPECT_EQ(b.page_pool().reserved, 0u);
  }
}

}  // namespace
}  // namespace baton
