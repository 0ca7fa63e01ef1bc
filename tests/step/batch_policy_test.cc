// The batch policy's scalar reference (baton/batch_policy.h): worked
// examples of each rule, and random batches checked against the rules as the
// header states them, derived here a second way (the budget a reading
// position gets is what the earlier reading positions left of it, in
// position order, after every decoding position took its one token).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "baton/batch_policy.h"
#include "baton/host_batch.h"
#include "support/test_seed.h"

namespace baton {
namespace {

// A batch on the host, as the scheduler keeps it.
struct Batch : HostBatch {
  explicit Batch(std::uint32_t n) : HostBatch(n) {}
  // Position p: an item reading an input of `input` tokens, `ran` of them run.
  void Set(std::uint32_t p, std::uint32_t input, std::uint32_t ran) const {
    args().items[p] = WorkItem::make(1, p, input);
    args().item_tokens[p] = ran;
  }
  [[nodiscard]] std::vector<std::uint32_t> Tokens() const {
    return {args().tokens, args().tokens + args().max_batch};
  }
  [[nodiscard]] std::vector<std::uint32_t> Offsets() const {
    return {args().token_offsets, args().token_offsets + args().max_batch};
  }
};

TEST(BatchPolicyTest, WithoutABudgetEveryItemRunsOneToken) {
  Batch b(4);
  b.Set(0, 100, 0);
  b.Set(1, 1, 7);
  b.Set(2, 9, 3);
  EXPECT_EQ(PlanStepTokens(TokenPolicy{}, b.args(), 3), 3u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{1, 1, 1, 0}));
  EXPECT_EQ(b.Offsets(), (std::vector<std::uint32_t>{0, 1, 2, 0}));
}

TEST(BatchPolicyTest, DecodesFirstThenChunksInAdmissionOrder) {
  Batch b(4);
  b.Set(0, 1000, 0);   // reading: wants 1000
  b.Set(1, 16, 40);    // decoding
  b.Set(2, 300, 100);  // reading: wants 200
  b.Set(3, 5, 5);      // decoding (its prompt just ended)
  // 512 - 2 decodes = 510 for the readers: the oldest takes all of it.
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 0}, b.args(), 4), 512u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{510, 1, 0, 1}));
  EXPECT_EQ(b.Offsets(), (std::vector<std::uint32_t>{0, 510, 511, 511}));
  // A chunk cap of 128 lets the second reader in too.
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 128}, b.args(), 4), 258u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{128, 1, 128, 1}));
  EXPECT_EQ(b.Offsets(), (std::vector<std::uint32_t>{0, 128, 129, 257}));
  // The end of a prompt: what is left of it, below the cap.
  b.Set(0, 1000, 990);
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 128}, b.args(), 4), 140u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{10, 1, 128, 1}));
  // A token per step.
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 1}, b.args(), 4), 4u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{1, 1, 1, 1}));
}

// A step in which nobody decodes takes max_tokens_without_decodes (and its
// chunks the same cap); one decoding position brings back the budget.
TEST(BatchPolicyTest, AStepWithoutDecodesTakesItsOwnBudget) {
  Batch b(3);
  b.Set(0, 1000, 0);
  b.Set(1, 3000, 0);
  const TokenPolicy policy{512, 0, 2048};
  EXPECT_EQ(policy.max_rows(), 2048u);
  EXPECT_EQ(PlanStepTokens(policy, b.args(), 2), 2048u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{1000, 1048, 0}));
  EXPECT_EQ(b.Offsets(), (std::vector<std::uint32_t>{0, 1000, 0}));
  // A chunk cap still caps each reader.
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 700, 2048}, b.args(), 2), 1400u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{700, 700, 0}));
  // One decoding position: 512 - 1 for the readers.
  b.Set(2, 4, 4);
  EXPECT_EQ(PlanStepTokens(policy, b.args(), 3), 512u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{511, 0, 1}));
  // At most max_tokens_per_step: the one budget.
  b.Set(2, 4, 0);
  EXPECT_EQ(PlanStepTokens(TokenPolicy{512, 0, 256}, b.args(), 3), 512u);
  EXPECT_EQ(b.Tokens(), (std::vector<std::uint32_t>{512, 0, 0}));
  EXPECT_EQ((TokenPolicy{512, 0, 256}.max_rows()), 512u);
}

TEST(BatchPolicyTest, AnEmptyPayloadIsAnInputOfOneToken) {
  EXPECT_EQ(InputTokens(WorkItem::make(1, 0, 0)), 1u);
  EXPECT_EQ(InputTokens(WorkItem::make(1, 0, 0x500000007ull)), 7u);  // the low 32 bits
}

TEST(BatchPolicyTest, RetireKeepsOrderAndCountsTheTokensRun) {
  Batch b(4);
  std::vector<std::uint32_t> free_slots(4);
  std::uint32_t free_count = 0;
  for (std::uint32_t p = 0; p < 4; ++p) {
    b.args().items[p] = WorkItem::make(1, 10 + p, 1);
    b.args().slots[p] = 3 - p;
    b.args().item_steps[p] = p;
    b.args().item_tokens[p] = 100 * p;
    b.args().tokens[p] = p + 1;
  }
  for (std::uint32_t p = 0; p < 4; ++p) b.args().finished[p] = p % 2;
  std::vector<std::uint32_t> retired;
  const std::uint32_t kept =
      RetireStep(b.args(), 4, free_slots.data(), free_count,
                 [&](std::uint32_t p) { retired.push_back(b.args().items[p].id); });
  EXPECT_EQ(kept, 2u);
  EXPECT_EQ(retired, (std::vector<std::uint32_t>{11, 13}));
  EXPECT_EQ(free_count, 2u);
  EXPECT_EQ(free_slots[0], 2u);  // pushed in position order
  EXPECT_EQ(free_slots[1], 0u);
  EXPECT_EQ(b.args().items[0].id, 10u);
  EXPECT_EQ(b.args().items[1].id, 12u);
  EXPECT_EQ(b.args().item_steps[1], 3u);
  EXPECT_EQ(b.args().item_tokens[0], 1u);    // 0 + its 1 token
  EXPECT_EQ(b.args().item_tokens[1], 203u);  // 200 + its 3 tokens
  EXPECT_EQ(b.args().finished[0] + b.args().finished[1], 0u);
  // Admission takes the top of the stack.
  EXPECT_EQ(AdmitItem(b.args(), kept, free_slots.data(), free_count, WorkItem::make(1, 99, 4)), 3u);
  EXPECT_EQ(b.args().slots[2], 0u);
  EXPECT_EQ(b.args().item_tokens[2], 0u);
  EXPECT_EQ(free_count, 1u);
}

TEST(BatchPolicyTest, TheBucketHoldsRowsAndPositions) {
  const std::uint32_t sizes[] = {1, 2, 4, 8, 64, 512};
  EXPECT_EQ(ChooseStepBucket(sizes, 6, 3, 3), 2);
  EXPECT_EQ(ChooseStepBucket(sizes, 6, 3, 300), 5);
  EXPECT_EQ(ChooseStepBucket(sizes, 6, 9, 4), 4);  // positions waiting with no rows
  EXPECT_EQ(ChooseStepBucket(sizes, 6, 1, 513), -1);
}

// Random batches against the rules: every decoding position one token; the
// readers, in order, min(what is left of the input, the cap, what the budget
// still holds), where what it holds is the budget less the decodes and less
// what earlier readers took; offsets the running sum; rows within the budget.
// The budget is max_tokens_without_decodes when it is larger and nobody
// decodes (a third of the rounds have only readers).
TEST(BatchPolicyTest, RandomBatchesFollowTheRules) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937_64 rng(testing::TestSeed());
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 2000; ++round) {
    const std::uint32_t max_batch = uniform(1, 80);
    const std::uint32_t batch = uniform(0, max_batch);
    const TokenPolicy policy{uniform(max_batch, 700), uniform(0, 3) == 0 ? uniform(1, 300) : 0,
                             uniform(0, 1) ? uniform(0, 3000) : 0};
    const bool readers_only = uniform(0, 2) == 0;
    Batch b(max_batch);
    for (std::uint32_t p = 0; p < batch; ++p) {
      const std::uint32_t input = uniform(1, 2000);
      b.Set(p, input,
            readers_only || uniform(0, 1) ? uniform(0, input - 1) : input + uniform(0, 50));
    }
    const std::uint32_t rows = PlanStepTokens(policy, b.args(), batch);
    std::uint32_t decodes = 0;
    for (std::uint32_t p = 0; p < batch; ++p)
      decodes += b.args().item_tokens[p] >= InputTokens(b.args().items[p]);
    const std::uint32_t budget =
        decodes == 0 ? std::max(policy.max_tokens_per_step, policy.max_tokens_without_decodes)
                     : policy.max_tokens_per_step;
    const std::uint32_t cap =
        policy.max_chunk_tokens == 0 ? budget : std::min(policy.max_chunk_tokens, budget);
    std::uint32_t taken = 0, sum = 0;
    for (std::uint32_t p = 0; p < batch; ++p) {
      const std::uint32_t input = InputTokens(b.args().items[p]);
      std::uint32_t expected = 1;
      if (b.args().item_tokens[p] < input) {
        const std::uint32_t holds = budget - decodes - taken;
        expected = std::min({input - b.args().item_tokens[p], cap, holds});
        taken += expected;
      }
      ASSERT_EQ(b.args().tokens[p], expected) << "round " << round << " position " << p;
      ASSERT_EQ(b.args().token_offsets[p], sum) << "round " << round << " position " << p;
      sum += expected;
    }
    ASSERT_EQ(rows, sum);
    ASSERT_LE(rows, budget);
    ASSERT_LE(rows, policy.max_rows());
  }
}

}  // namespace
}  // namespace baton
