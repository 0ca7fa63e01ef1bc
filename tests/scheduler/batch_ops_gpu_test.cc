// The scheduler's warp-parallel batch policy (scheduler/batch_ops.cuh:
// retire, compact or advance, admit, plan the step's tokens) against the
// scalar reference every driver shares (baton/batch_policy.h), over random
// rounds with batches that are not a multiple of the warp size, random token
// budgets and chunk caps, and the plan with and without its register hints;
// and, for a paged program, the paging policy (scheduler/page_ops.cuh)
// against baton/page_policy.h: the same page stack, table rows, reserves and
// waiting items after every round, with a pool far smaller than the demand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "batch_ops_test_kernels.h"
#include "baton/batch_policy.h"
#include "baton/cuda_resources.h"
#include "baton/host_batch.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton {
namespace {

// One round, as batch_round runs it, on the scalar reference's batch;
// returns the completions and sets the step's rows.
std::vector<Completion> ReferenceRound(HostBatch& model, const std::vector<std::uint8_t>& finish,
                                       const std::vector<WorkItem>& offers,
                                       const TokenPolicy& policy, std::uint32_t& rows) {
  const StepArgs& a = model.args();
  for (std::uint32_t p = 0; p < model.batch(); ++p) {
    a.finished[p] = finish[p];
    if (finish[p]) a.results[p] = test::TestResult(p, a.items[p].id);
  }
  std::vector<Completion> retired;
  model.Retire([&](std::uint32_t p) {
    retired.push_back({a.items[p].id, static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                       a.item_steps[p] + 1, a.results[p]});
  });
  for (const WorkItem& item : offers) model.Admit(item);
  rows = model.PlanTokens(policy);
  return retired;
}

using BatchOpsTest = testing::GpuTest;

TEST_F(BatchOpsTest, MatchesTheScalarReferenceOverRandomRounds) {
  constexpr std::uint32_t kMaxBatch = 100;
  constexpr int kRounds = 400;
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()));
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  constexpr std::uint32_t kWords = kStepWords;
  BATON_ASSERT_OK_AND_ASSIGN(auto header, DeviceBuffer<StepHeader>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto items, DeviceBuffer<WorkItem>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto words, DeviceBuffer<std::uint32_t>::Create(kWords * kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto counts, DeviceBuffer<detail::BatchCounts>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto free_slots, DeviceBuffer<std::uint32_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto retired, DeviceBuffer<Completion>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto finish, DeviceBuffer<std::uint8_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto offers, DeviceBuffer<WorkItem>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto outputs, DeviceBuffer<std::uint32_t>::Create(2));
  BATON_ASSERT_OK(items.Fill(0xCD));  // poison: only admitted positions are ever read
  BATON_ASSERT_OK(words.Fill(0xCD));
  BATON_ASSERT_OK(retired.Fill(0xCD));  // only the first retired_count entries are written

  StepArgs args;
  args.header = header.data();
  args.items = items.data();
  args.max_batch = kMaxBatch;
  PointStepWords(args, words.data());
  detail::BatchBook book{counts.data(), free_slots.data(), retired.data()};

  HostBatch model(kMaxBatch);
  const StepArgs& expected = model.args();
  BATON_ASSERT_OK(free_slots.CopyFrom(model.free_slots()));
  const detail::BatchCounts initial{0, kMaxBatch, 0, 0};
  ASSERT_EQ(cudaMemcpy(counts.data(), &initial, sizeof(initial), cudaMemcpyHostToDevice),
            cudaSuccess);

  std::uint32_t next_id = 1;
  for (int round = 0; round < kRounds; ++round) {
    const std::uint32_t batch = model.batch();
    // Vary the finish rate so the batch fills, drains and refills; a third of
    // the rounds retire nothing (the scheduler's advance path).
    const double rate =
        uniform(0, 2) == 0 ? 0.0 : std::uniform_real_distribution<double>(0.0, 0.6)(rng);
    std::vector<std::uint8_t> flags(kMaxBatch, 0);
    std::uint32_t finishing = 0;
    for (std::uint32_t p = 0; p < batch; ++p) {
      flags[p] = std::bernoulli_distribution(rate)(rng);
      finishing += flags[p];
    }
    const std::uint32_t room = kMaxBatch - batch + finishing;
    const std::uint32_t n = uniform(0, std::min(room, uniform(0, 1) ? 40u : room));
    std::vector<WorkItem> offer;
    for (std::uint32_t i = 0; i < n; ++i) {
      // The payload's low word is the item's input (0 counts as 1).
      offer.push_back(
          WorkItem::make(3, next_id, (std::uint64_t{next_id} << 32) | uniform(0, 1500)));
      ++next_id;
    }
    // No budget, a budget with and without a chunk cap (either with a larger
    // budget for steps without decodes, half the time), a token per step.
    const std::uint32_t kind = uniform(0, 3);
    const std::uint32_t alone = uniform(0, 1) ? uniform(0, 3000) : 0;
    const TokenPolicy policy = kind == 0   ? TokenPolicy{}
                               : kind == 1 ? TokenPolicy{uniform(kMaxBatch, 1024), 0, alone}
                               : kind == 2
                                   ? TokenPolicy{uniform(kMaxBatch, 1024), uniform(1, 300), alone}
                                   : TokenPolicy{kMaxBatch, 1};
    const bool hinted = uniform(0, 1) == 1;
    BATON_ASSERT_OK(finish.CopyFrom(flags));
    if (n > 0) {
      ASSERT_EQ(
          cudaMemcpy(offers.data(), offer.data(), n * sizeof(WorkItem), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    ASSERT_EQ(test::EnqueueBatchRound(args, book, finish.data(), offers.data(), n, policy, hinted,
                                      outputs.data(), outputs.data() + 1, stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    std::uint32_t rows = 0;
    const std::vector<Completion> expected_retired =
        ReferenceRound(model, flags, offer, policy, rows);

    std::uint32_t got[2] = {};
    ASSERT_EQ(cudaMemcpy(got, outputs.data(), sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(got[0], expected_retired.size()) << "round " << round;
    ASSERT_EQ(got[1], rows) << "round " << round << ": the step's rows";
    std::vector<Completion> retired_host(kMaxBatch);
    BATON_ASSERT_OK(retired.CopyTo(absl::MakeSpan(retired_host)));
    for (std::uint32_t i = 0; i < got[0]; ++i) {
      const Completion& a = retired_host[i];
      const Completion& b = expected_retired[i];
      ASSERT_TRUE(a.id == b.id && a.status == b.status && a.steps == b.steps && a.value == b.value)
          << "round " << round << " completion " << i << ": id " << a.id << " vs " << b.id;
    }
    detail::BatchCounts counted{};
    ASSERT_EQ(cudaMemcpy(&counted, counts.data(), sizeof(counted), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(counted.batch, model.batch()) << "round " << round;
    ASSERT_EQ(counted.batch + counted.free_count, kMaxBatch) << "round " << round;
    std::vector<WorkItem> items_host(kMaxBatch);
    std::vector<std::uint32_t> words_host(kWords * kMaxBatch), free_host(kMaxBatch);
    BATON_ASSERT_OK(items.CopyTo(absl::MakeSpan(items_host)));
    BATON_ASSERT_OK(words.CopyTo(absl::MakeSpan(words_host)));
    BATON_ASSERT_OK(free_slots.CopyTo(absl::MakeSpan(free_host)));
    const auto at = [&](std::uint32_t w, std::uint32_t p) { return words_host[w * kMaxBatch + p]; };
    for (std::uint32_t p = 0; p < counted.batch; ++p) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " position " << p);
      ASSERT_EQ(items_host[p].id, expected.items[p].id);
      ASSERT_EQ(items_host[p].payload, expected.items[p].payload);
      ASSERT_EQ(at(0, p), expected.slots[p]);
      ASSERT_EQ(at(1, p), expected.item_steps[p]);
      ASSERT_EQ(at(2, p), expected.item_tokens[p]);
      ASSERT_EQ(at(3, p), expected.tokens[p]);
      ASSERT_EQ(at(4, p), expected.token_offsets[p]);
      ASSERT_EQ(at(5, p), 0u) << "survivors start unfinished";
    }
    std::vector<std::uint32_t> free_device(free_host.begin(),
                                           free_host.begin() + counted.free_count);
    ASSERT_EQ(free_device,
              std::vector<std::uint32_t>(model.free_slots().begin(),
                                         model.free_slots().begin() + model.free_count()))
        << "round " << round;
    // Every slot is either active or free, exactly once.
    std::vector<std::uint32_t> all(free_device);
    for (std::uint32_t p = 0; p < counted.batch; ++p) all.push_back(at(0, p));
    std::sort(all.begin(), all.end());
    for (std::uint32_t s = 0; s < kMaxBatch; ++s) ASSERT_EQ(all[s], s) << "round " << round;
  }
}

TEST_F(BatchOpsTest, PagedRoundsMatchTheScalarReference) {
  constexpr std::uint32_t kMaxBatch = 40, kPageTokens = 16, kPerSlot = 12, kPool = 100;
  constexpr int kRounds = 300;
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()) + 1);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  BATON_ASSERT_OK_AND_ASSIGN(auto header, DeviceBuffer<StepHeader>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto items, DeviceBuffer<WorkItem>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto words,
                             DeviceBuffer<std::uint32_t>::Create(kStepWords * kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto counts, DeviceBuffer<detail::BatchCounts>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto free_slots, DeviceBuffer<std::uint32_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto retired, DeviceBuffer<Completion>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto free_pages, DeviceBuffer<std::uint32_t>::Create(kPool));
  BATON_ASSERT_OK_AND_ASSIGN(auto held, DeviceBuffer<WorkItem>::Create(detail::kHeldItems));
  BATON_ASSERT_OK_AND_ASSIGN(auto table, DeviceBuffer<std::uint32_t>::Create(kMaxBatch * kPerSlot));
  BATON_ASSERT_OK_AND_ASSIGN(auto finish, DeviceBuffer<std::uint8_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto offers, DeviceBuffer<WorkItem>::Create(1024));
  BATON_ASSERT_OK_AND_ASSIGN(auto outputs, DeviceBuffer<std::uint32_t>::Create(3));
  BATON_ASSERT_OK(items.Fill(0xCD));
  BATON_ASSERT_OK(words.Fill(0xCD));
  BATON_ASSERT_OK(table.Fill(0xCD));  // poison: entries are read only once mapped
  BATON_ASSERT_OK(held.Fill(0xCD));   // only the first c.held entries are compared

  StepArgs args;
  args.header = header.data();
  args.items = items.data();
  args.max_batch = kMaxBatch;
  PointStepWords(args, words.data());
  const detail::BatchBook book{counts.data(), free_slots.data(), retired.data(), free_pages.data(),
                               held.data()};
  const PagePolicy pages{kPageTokens, kPool, kPerSlot, table.data()};

  HostBatch model(kMaxBatch, pages);
  const StepArgs& expected = model.args();
  BATON_ASSERT_OK(free_slots.CopyFrom(model.free_slots()));
  BATON_ASSERT_OK(free_pages.CopyFrom(std::vector<std::uint32_t>(
      model.page_pool().free_pages, model.page_pool().free_pages + kPool)));
  detail::BatchCounts initial{0, kMaxBatch, 0, 0};
  initial.free_pages = kPool;
  ASSERT_EQ(cudaMemcpy(counts.data(), &initial, sizeof(initial), cudaMemcpyHostToDevice),
            cudaSuccess);

  std::deque<WorkItem> pending;  // the reference's queue: not yet admitted
  std::vector<WorkItem> queued;  // what the device has not taken from the queue yet
  std::uint32_t next_id = 1, admitted_total = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    const double rate = std::uniform_real_distribution<double>(0.0, 0.5)(rng);
    std::vector<std::uint8_t> flags(kMaxBatch, 0);
    for (std::uint32_t p = 0; p < model.batch(); ++p)
      flags[p] = std::bernoulli_distribution(rate)(rng);
    for (std::uint32_t n = queued.size() < 200 ? uniform(0, 40) : 0; n > 0; --n) {
      const std::uint32_t bound = uniform(1, kPerSlot * kPageTokens + 40);  // some clamped
      const WorkItem item =
          WorkItem::make(3, next_id++, std::uint64_t{bound} << 32 | uniform(1, bound));
      pending.push_back(item);
      queued.push_back(item);
    }
    const std::uint32_t kind = uniform(0, 2);
    const std::uint32_t alone = uniform(0, 1) ? uniform(0, 1500) : 0;
    const TokenPolicy policy = kind == 0 ? TokenPolicy{}
                               : kind == 1
                                   ? TokenPolicy{uniform(kMaxBatch, 600), 0, alone}
                                   : TokenPolicy{uniform(kMaxBatch, 600), uniform(1, 90), alone};
    BATON_ASSERT_OK(finish.CopyFrom(flags));
    if (!queued.empty()) {
      ASSERT_EQ(cudaMemcpy(offers.data(), queued.data(), queued.size() * sizeof(WorkItem),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    ASSERT_EQ(test::EnqueuePagedBatchRound(args, book, pages, finish.data(), offers.data(),
                                           static_cast<std::uint32_t>(queued.size()), policy,
                                           outputs.data(), outputs.data() + 1, outputs.data() + 2,
                                           stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);

    // The reference: retire, admit from the queue's head while it fits, plan.
    const StepArgs& a = model.args();
    for (std::uint32_t p = 0; p < model.batch(); ++p) {
      a.finished[p] = flags[p];
      if (flags[p]) a.results[p] = test::TestResult(p, a.items[p].id);
    }
    std::uint32_t retiring = 0;
    model.Retire([&](std::uint32_t) { ++retiring; });
    while (!pending.empty() && model.CanAdmit(pending.front())) {
      model.Admit(pending.front());
      pending.pop_front();
      ++admitted_total;
    }
    const std::uint32_t rows = model.PlanTokens(policy);

    std::uint32_t got[3] = {};
    ASSERT_EQ(cudaMemcpy(got, outputs.data(), sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(got[0], retiring);
    ASSERT_EQ(got[1], rows);
    queued.erase(queued.begin(), queued.begin() + got[2]);
    detail::BatchCounts c{};
    ASSERT_EQ(cudaMemcpy(&c, counts.data(), sizeof(c), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(c.batch, model.batch());
    ASSERT_EQ(c.reserved_pages, model.page_pool().reserved);
    ASSERT_EQ(c.free_pages, model.page_pool().free_count);
    // Held, then still queued: the reference's queue, in order.
    ASSERT_EQ(c.held + queued.size(), pending.size());
    std::vector<WorkItem> held_host(detail::kHeldItems);
    BATON_ASSERT_OK(held.CopyTo(absl::MakeSpan(held_host)));
    for (std::uint32_t i = 0; i < c.held; ++i) ASSERT_EQ(held_host[i].id, pending[i].id) << i;
    std::vector<WorkItem> items_host(kMaxBatch);
    std::vector<std::uint32_t> words_host(kStepWords * kMaxBatch), pages_host(kPool),
        table_host(kMaxBatch * kPerSlot);
    BATON_ASSERT_OK(items.CopyTo(absl::MakeSpan(items_host)));
    BATON_ASSERT_OK(words.CopyTo(absl::MakeSpan(words_host)));
    BATON_ASSERT_OK(free_pages.CopyTo(absl::MakeSpan(pages_host)));
    BATON_ASSERT_OK(table.CopyTo(absl::MakeSpan(table_host)));
    for (std::uint32_t i = 0; i < c.free_pages; ++i) {
      ASSERT_EQ(pages_host[i], model.page_pool().free_pages[i]) << "free page " << i;
    }
    for (std::uint32_t p = 0; p < c.batch; ++p) {
      SCOPED_TRACE(::testing::Message() << "position " << p);
      ASSERT_EQ(items_host[p].id, expected.items[p].id);
      const std::uint32_t slot = words_host[p];
      ASSERT_EQ(slot, expected.slots[p]);
      ASSERT_EQ(words_host[2 * kMaxBatch + p], expected.item_tokens[p]);
      ASSERT_EQ(words_host[3 * kMaxBatch + p], expected.tokens[p]);
      const std::uint32_t held_pages =
          HeldPages(pages, expected.items[p], expected.item_tokens[p] + expected.tokens[p]);
      for (std::uint32_t j = 0; j < held_pages; ++j) {
        ASSERT_EQ(table_host[slot * kPerSlot + j], model.page_table()[slot * kPerSlot + j])
            << "page " << j;
      }
    }
  }
  EXPECT_GT(admitted_total, 200u) << "the pool was exercised";
}

}  // namespace
}  // namespace baton
