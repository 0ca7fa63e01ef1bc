// The tensor-parallel lockstep channel (src/scheduler/lockstep_channel.h)
// and its records (lockstep_record.h) on the device: a leader warp publishes
// 20,000 synthetic steps and every follower warp copies, unpacks and checks
// each one, with followers pausing at random. Two layouts: the ranks as
// blocks of one kernel on one GPU, and (with 2 or more GPUs; skipped
// otherwise) one kernel per GPU with the channel in GPU 0's memory, which the
// others reach over peer access, as the schedulers in lockstep will. Checked:
// every follower unpacks every step in order and whole into its poisoned
// StepArgs; the leader is never more than one record past a follower's
// acquired one; a fault raised by one rank ends every rank's run naming it,
// well within the waits' patience; a follower that stops copying times the
// leader out after its patience (not before), and the leader's fault names
// that follower to every other rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "baton/cuda_resources.h"
#include "foundation/device_scope.h"
#include "scheduler/lockstep_record.h"
#include "scheduler/lockstep_test_kernels.h"
#include "support/gpu_test.h"

namespace baton::test {
namespace {

using baton::testing::GpuTest;
using detail::LockstepChannel;

constexpr std::uint32_t kMaxBatch = 24;

// One rank's device memory (on its GPU).
struct RankMemory {
  int device = 0;
  DeviceBuffer<StepHeader> header;
  DeviceBuffer<WorkItem> items;
  DeviceBuffer<std::uint32_t> words;  // [kStepWords][kMaxBatch]
  DeviceBuffer<std::uint32_t> copy;
  DeviceBuffer<LockstepOutcome> outcome;
  Stream stream;
};

class LockstepChannelGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudaGetDeviceCount(&gpus_), cudaSuccess);
  }

  // Ranks across `gpus` GPUs (one each), or `ranks` blocks on GPU 0 when
  // gpus is 1. Returns each rank's outcome and the channel afterwards.
  void Run(int ranks, int gpus, const LockstepScenario& scenario,
           std::vector<LockstepOutcome>& outcomes, LockstepChannel& channel_after,
           double& seconds) {
    const std::size_t words_per_half =
        detail::lockstep_record_words(kMaxBatch, kMaxBatch, PagePolicy{});
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto channel = DeviceBuffer<LockstepChannel>::Create(1);
    auto halves = DeviceBuffer<std::uint32_t>::Create(2 * words_per_half);
    ASSERT_TRUE(channel.ok() && halves.ok());
    ASSERT_TRUE(channel->Fill(0).ok());
    ASSERT_TRUE(halves->Fill(0).ok());
    std::vector<RankMemory> memory(ranks);
    for (int r = 0; r < ranks; ++r) {
      RankMemory& m = memory[r];
      m.device = gpus == 1 ? 0 : r;
      ASSERT_EQ(cudaSetDevice(m.device), cudaSuccess);
      if (m.device != 0) {
        int can = 0;
        ASSERT_EQ(cudaDeviceCanAccessPeer(&can, m.device, 0), cudaSuccess);
        if (can == 0) GTEST_SKIP() << "GPU " << m.device << " cannot reach GPU 0's memory";
        BATON_ASSERT_OK(detail::EnablePeerAccess(m.device, 0, "the test needs peer access"));
      }
      m.header = *DeviceBuffer<StepHeader>::Create(1);
      m.items = *DeviceBuffer<WorkItem>::Create(kMaxBatch);
      m.words = *DeviceBuffer<std::uint32_t>::Create(std::size_t{kStepWords} * kMaxBatch);
      m.copy = *DeviceBuffer<std::uint32_t>::Create(words_per_half);
      m.outcome = *DeviceBuffer<LockstepOutcome>::Create(1);
      ASSERT_TRUE(m.outcome.CopyFrom(std::vector<LockstepOutcome>(1)).ok());
      auto stream = CreateStream();
      ASSERT_TRUE(stream.ok()) << stream.status();
      m.stream = std::move(*stream);
    }
    const auto rank_of = [&](int r) {
      LockstepRank rank;
      rank.rank = r;
      rank.args.header = memory[r].header.data();
      rank.args.items = memory[r].items.data();
      rank.args.max_batch = kMaxBatch;
      rank.args.max_tokens = kMaxBatch;
      PointStepWords(rank.args, memory[r].words.data());
      rank.copy = memory[r].copy.data();
      rank.outcome = memory[r].outcome.data();
      return rank;
    };
    LockstepLaunch launch;
    launch.channel = channel->data();
    launch.halves.words = halves->data();
    launch.halves.words_per_half = words_per_half;
    launch.ranks = ranks;
    const auto start = std::chrono::steady_clock::now();
    if (gpus == 1) {
      launch.count = ranks;
      for (int r = 0; r < ranks; ++r) launch.rank[r] = rank_of(r);
      ASSERT_EQ(EnqueueLockstepRanks(launch, scenario, memory[0].stream.get()), cudaSuccess);
    } else {
      launch.count = 1;
      for (int r = ranks - 1; r >= 0; --r) {  // followers first: the leader waits for them
        ASSERT_EQ(cudaSetDevice(memory[r].device), cudaSuccess);
        launch.rank[0] = rank_of(r);
        ASSERT_EQ(EnqueueLockstepRanks(launch, scenario, memory[r].stream.get()), cudaSuccess);
      }
    }
    for (RankMemory& m : memory) {
      ASSERT_EQ(cudaSetDevice(m.device), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(m.stream.get()), cudaSuccess);
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcomes.clear();
    for (RankMemory& m : memory) {
      std::vector<LockstepOutcome> o(1);
      ASSERT_EQ(cudaSetDevice(m.device), cudaSuccess);
      ASSERT_TRUE(m.outcome.CopyTo(absl::MakeSpan(o)).ok());
      outcomes.push_back(o[0]);
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    std::vector<LockstepChannel> c(1);
    ASSERT_TRUE(channel->CopyTo(absl::MakeSpan(c)).ok());
    channel_after = c[0];
  }

  // The GPUs a cross-GPU run takes: every visible one, at most 8.
  int CrossGpus() const { return std::min(gpus_, kLockstepMaxRanks); }

  void EveryStepInOrderAndWhole(int ranks, int gpus) {
    LockstepScenario scenario;
    scenario.records = 20000;
    scenario.patience_ns = 5'000'000'000ull;
    scenario.lag = true;
    std::vector<LockstepOutcome> o;
    LockstepChannel channel{};
    double seconds = 0;
    ASSERT_NO_FATAL_FAILURE(Run(ranks, gpus, scenario, o, channel, seconds));
    std::printf("%d ranks on %d GPU(s): %llu records in %.3f s\n", ranks, gpus,
                static_cast<unsigned long long>(scenario.records), seconds);
    for (int r = 0; r < ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(o[r].ended, LockstepEnd::kFinished);
      EXPECT_EQ(o[r].records, scenario.records);
      EXPECT_EQ(o[r].mismatches, 0u);
      EXPECT_LE(o[r].ahead, 1u);  // record s + 2 needs the half record s holds
      EXPECT_EQ(o[r].faulted_rank, -1);
      if (r > 0) EXPECT_EQ(channel.copied[r - 1], scenario.records);
    }
    EXPECT_EQ(channel.published, scenario.records);
    EXPECT_EQ(channel.fault, 0u);
  }

  void AFaultStopsEveryRankNamingIt(int ranks, int gpus) {
    LockstepScenario scenario;
    scenario.records = 20000;
    scenario.patience_ns = 5'000'000'000ull;
    scenario.fault_rank = ranks - 1;
    scenario.fault_at = 500;
    scenario.lag = true;
    std::vector<LockstepOutcome> o;
    LockstepChannel channel{};
    double seconds = 0;
    ASSERT_NO_FATAL_FAILURE(Run(ranks, gpus, scenario, o, channel, seconds));
    // Every wait polls the fault: the run ends long before any patience does.
    EXPECT_LT(seconds, 2.0);
    const int faulty = scenario.fault_rank;
    EXPECT_EQ(channel.fault, static_cast<std::uint32_t>(faulty) + 1);
    EXPECT_EQ(o[faulty].ended, LockstepEnd::kRaised);
    EXPECT_EQ(o[faulty].records, 499u);
    // The leader publishes until it needs the faulty rank's half (record 502).
    EXPECT_EQ(o[0].ended, LockstepEnd::kFaulted);
    EXPECT_GE(o[0].records, 499u);
    EXPECT_LE(o[0].records, 501u);
    for (int r = 0; r < ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(o[r].faulted_rank, faulty);
      EXPECT_EQ(o[r].mismatches, 0u);
      if (r == 0 || r == faulty) continue;
      EXPECT_EQ(o[r].ended, LockstepEnd::kFaulted);
      EXPECT_GE(o[r].records, 499u);
      EXPECT_LE(o[r].records, o[0].records);
    }
  }

  void AStalledFollowerTimesTheLeaderOut(int ranks, int gpus) {
    LockstepScenario scenario;
    scenario.records = 20000;
    scenario.patience_ns = 100'000'000ull;  // 0.1 s
    scenario.stall_rank = 1;
    scenario.stall_at = 300;
    std::vector<LockstepOutcome> o;
    LockstepChannel channel{};
    double seconds = 0;
    ASSERT_NO_FATAL_FAILURE(Run(ranks, gpus, scenario, o, channel, seconds));
    // The leader gives up after its patience, not before, and well before
    // a second one would pass.
    EXPECT_GE(seconds, 0.1);
    EXPECT_LT(seconds, 2.0);
    EXPECT_EQ(o[1].ended, LockstepEnd::kStalled);
    EXPECT_EQ(o[1].records, 299u);
    EXPECT_EQ(channel.copied[0], 299u);
    // Record 301 needs 299 from everyone; 302 needs 300 from rank 1.
    EXPECT_EQ(o[0].ended, LockstepEnd::kTimedOut);
    EXPECT_EQ(o[0].records, 301u);
    EXPECT_EQ(o[0].lagging, 0);
    EXPECT_EQ(channel.fault, 2u);  // rank 1, raised by the leader
    for (int r = 2; r < ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(o[r].ended, LockstepEnd::kFaulted);
      EXPECT_EQ(o[r].records, 301u);
      EXPECT_EQ(o[r].faulted_rank, 1);
      EXPECT_EQ(o[r].mismatches, 0u);
    }
  }

  int gpus_ = 0;
};

TEST_F(LockstepChannelGpuTest, OneGpuEveryFollowerUnpacksEveryStepInOrderAndWhole) {
  EveryStepInOrderAndWhole(4, 1);
}
TEST_F(LockstepChannelGpuTest, OneGpuAFaultOnOneRankStopsEveryRankNamingIt) {
  AFaultStopsEveryRankNamingIt(4, 1);
}
TEST_F(LockstepChannelGpuTest, OneGpuAStalledFollowerTimesTheLeaderOutNamingIt) {
  AStalledFollowerTimesTheLeaderOut(4, 1);
}
TEST_F(LockstepChannelGpuTest, AcrossGpusEveryFollowerUnpacksEveryStepInOrderAndWhole) {
  // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
  if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, the cross-GPU channel needs 2";
  const int gpus = CrossGpus();
  EveryStepInOrderAndWhole(gpus, gpus);
}
TEST_F(LockstepChannelGpuTest, AcrossGpusAFaultOnOneRankStopsEveryRankNamingIt) {
  // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
  if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, the cross-GPU channel needs 2";
  const int gpus = CrossGpus();
  AFaultStopsEveryRankNamingIt(gpus, gpus);
}
TEST_F(LockstepChannelGpuTest, AcrossGpusAStalledFollowerTimesTheLeaderOutNamingIt) {
  // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
  if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, the cross-GPU channel needs 2";
  const int gpus = CrossGpus();
  AStalledFollowerTimesTheLeaderOut(gpus, gpus);
}

}  // namespace
}  // namespace baton::test
