// The scheduler's batch bookkeeping (retire, compact, admit) on one warp
// against a CPU model, over random rounds with a batch that is not a multiple
// of the warp size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "batch_ops_test_kernels.h"
#include "baton/cuda_resources.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton {
namespace {

struct ModelEntry {
  WorkItem item;
  std::uint32_t slot;
  std::uint32_t steps;
};

// The CPU model of one round.
struct Model {
  std::vector<ModelEntry> active;
  std::vector<std::uint32_t> free_slots;  // a stack: back() is taken first

  std::vector<Completion> Round(const std::vector<std::uint8_t>& finish,
                                const std::vector<WorkItem>& offers) {
    std::vector<Completion> retired;
    std::vector<ModelEntry> kept;
    for (std::uint32_t p = 0; p < active.size(); ++p) {
      if (finish[p]) {
        retired.push_back({active[p].item.id,
                           static_cast<std::uint32_t>(CompletionStatus::kCompleted),
                           active[p].steps + 1, test::TestResult(p, active[p].item.id)});
        free_slots.push_back(active[p].slot);
      } else {
        kept.push_back({active[p].item, active[p].slot, active[p].steps + 1});
      }
    }
    active = kept;
    for (const WorkItem& item : offers) {
      active.push_back({item, free_slots.back(), 0});
      free_slots.pop_back();
    }
    return retired;
  }
};

using BatchOpsTest = testing::GpuTest;

TEST_F(BatchOpsTest, MatchesTheCpuModelOverRandomRounds) {
  constexpr std::uint32_t kMaxBatch = 100;
  constexpr int kRounds = 300;
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()));
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  BATON_ASSERT_OK_AND_ASSIGN(auto header, DeviceBuffer<StepHeader>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto items, DeviceBuffer<WorkItem>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto words, DeviceBuffer<std::uint32_t>::Create(4 * kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto counts, DeviceBuffer<detail::BatchCounts>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto free_slots, DeviceBuffer<std::uint32_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto retired, DeviceBuffer<Completion>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto finish, DeviceBuffer<std::uint8_t>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto offers, DeviceBuffer<WorkItem>::Create(kMaxBatch));
  BATON_ASSERT_OK_AND_ASSIGN(auto retired_count, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_ASSERT_OK(items.Fill(0xCD));  // poison: only admitted positions are ever read
  BATON_ASSERT_OK(words.Fill(0xCD));
  BATON_ASSERT_OK(retired.Fill(0xCD));  // only the first retired_count entries are written

  StepArgs args;
  args.header = header.data();
  args.items = items.data();
  args.slots = words.data();
  args.item_steps = words.data() + kMaxBatch;
  args.finished = words.data() + 2 * kMaxBatch;
  args.results = words.data() + 3 * kMaxBatch;
  args.max_batch = kMaxBatch;
  detail::BatchBook book{counts.data(), free_slots.data(), retired.data()};

  Model model;
  for (std::uint32_t s = 0; s < kMaxBatch; ++s) model.free_slots.push_back(kMaxBatch - 1 - s);
  BATON_ASSERT_OK(free_slots.CopyFrom(model.free_slots));
  const detail::BatchCounts initial{0, kMaxBatch};
  ASSERT_EQ(cudaMemcpy(counts.data(), &initial, sizeof(initial), cudaMemcpyHostToDevice),
            cudaSuccess);

  std::uint32_t next_id = 1;
  for (int round = 0; round < kRounds; ++round) {
    const std::uint32_t batch = static_cast<std::uint32_t>(model.active.size());
    // Vary the finish rate so the batch fills, drains and refills.
    const double rate = std::uniform_real_distribution<double>(0.0, 0.6)(rng);
    std::vector<std::uint8_t> flags(kMaxBatch, 0);
    std::uint32_t finishing = 0;
    for (std::uint32_t p = 0; p < batch; ++p) {
      flags[p] = std::bernoulli_distribution(rate)(rng);
      finishing += flags[p];
    }
    const std::uint32_t room = kMaxBatch - batch + finishing;
    const std::uint32_t n = std::uniform_int_distribution<std::uint32_t>(0, room)(rng);
    std::vector<WorkItem> offer;
    for (std::uint32_t i = 0; i < n; ++i) {
      offer.push_back(WorkItem::make(3, next_id, next_id * 1000003ull));
      ++next_id;
    }
    BATON_ASSERT_OK(finish.CopyFrom(flags));
    if (n > 0) {
      ASSERT_EQ(
          cudaMemcpy(offers.data(), offer.data(), n * sizeof(WorkItem), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
    ASSERT_EQ(test::EnqueueBatchRound(args, book, finish.data(), offers.data(), n,
                                      retired_count.data(), stream.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    const std::vector<Completion> expected_retired = model.Round(flags, offer);

    std::uint32_t got_retired = 0;
    ASSERT_EQ(cudaMemcpy(&got_retired, retired_count.data(), 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(got_retired, expected_retired.size()) << "round " << round;
    std::vector<Completion> retired_host(kMaxBatch);
    BATON_ASSERT_OK(retired.CopyTo(absl::MakeSpan(retired_host)));
    for (std::uint32_t i = 0; i < got_retired; ++i) {
      const Completion& a = retired_host[i];
      const Completion& b = expected_retired[i];
      ASSERT_TRUE(a.id == b.id && a.status == b.status && a.steps == b.steps && a.value == b.value)
          << "round " << round << " completion " << i << ": id " << a.id << " vs " << b.id;
    }
    detail::BatchCounts got{};
    ASSERT_EQ(cudaMemcpy(&got, counts.data(), sizeof(got), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(got.batch, model.active.size()) << "round " << round;
    ASSERT_EQ(got.batch + got.free_count, kMaxBatch) << "round " << round;
    std::vector<WorkItem> items_host(kMaxBatch);
    std::vector<std::uint32_t> words_host(4 * kMaxBatch), free_host(kMaxBatch);
    BATON_ASSERT_OK(items.CopyTo(absl::MakeSpan(items_host)));
    BATON_ASSERT_OK(words.CopyTo(absl::MakeSpan(words_host)));
    BATON_ASSERT_OK(free_slots.CopyTo(absl::MakeSpan(free_host)));
    for (std::uint32_t p = 0; p < got.batch; ++p) {
      ASSERT_EQ(items_host[p].id, model.active[p].item.id) << "round " << round << " pos " << p;
      ASSERT_EQ(items_host[p].payload, model.active[p].item.payload);
      ASSERT_EQ(words_host[p], model.active[p].slot) << "round " << round << " pos " << p;
      ASSERT_EQ(words_host[kMaxBatch + p], model.active[p].steps) << "round " << round;
      ASSERT_EQ(words_host[2 * kMaxBatch + p], 0u) << "survivors start unfinished";
    }
    std::vector<std::uint32_t> free_device(free_host.begin(), free_host.begin() + got.free_count);
    ASSERT_EQ(free_device, model.free_slots) << "round " << round;
    // Every slot is either active or free, exactly once.
    std::vector<std::uint32_t> all(free_device);
    for (std::uint32_t p = 0; p < got.batch; ++p) all.push_back(words_host[p]);
    std::sort(all.begin(), all.end());
    for (std::uint32_t s = 0; s < kMaxBatch; ++s) ASSERT_EQ(all[s], s) << "round " << round;
  }
}

}  // namespace
}  // namespace baton
