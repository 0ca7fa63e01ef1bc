// The work queue on the GPU: exactly-once delivery under full contention
// (device producers and consumers at once, small rings that wrap many times,
// every batch size), host seeding while the device consumes, ticket wraps at
// 2^32 and 2^64, partially active warps against a scalar reference, FIFO
// order, refusal when full, close/terminate, drain and the bounded wait.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/work_queue.h"
#include "support/device_buffers.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"
#include "work_queue_test_kernels.h"

namespace baton {
namespace {

using test::ContentionArgs;
using test::PopMode;
using test::TestItem;

constexpr std::uint64_t k2To32 = std::uint64_t{1} << 32;

bool SameItem(const WorkItem& a, const WorkItem& b) {
  return a.kind == b.kind && a.id == b.id && a.payload == b.payload;
}

std::string Describe(const WorkItem& item) {
  return absl::StrCat("{kind ", item.kind, ", id ", item.id, ", payload ", item.payload, "}");
}

class WorkQueueGpuTest : public testing::GpuStreamTest {
 protected:
  void SetUp() override {
    GpuStreamTest::SetUp();  // a non-blocking stream
    if (IsSkipped() || HasFatalFailure()) return;
    rng_.seed(testing::TestSeed());
    BATON_ASSERT_OK_AND_ASSIGN(device_, QueryDevice());
    BATON_ASSERT_OK_AND_ASSIGN(consumed_, DeviceBuffer<unsigned long long>::Create(1));
    BATON_ASSERT_OK_AND_ASSIGN(stats_, DeviceBuffer<unsigned long long>::Create(test::kStatWords));
    BATON_ASSERT_OK_AND_ASSIGN(verdict_, DeviceBuffer<unsigned long long>::Create(2));
  }

  // Per-id delivery counters for `n` ids, zeroed ("lost" until delivered).
  void PrepareDeliveries(std::uint64_t n) {
    if (deliveries_.size() < n) {
      BATON_ASSERT_OK_AND_ASSIGN(deliveries_, DeviceBuffer<unsigned>::Create(n));
    }
    ASSERT_EQ(cudaMemsetAsync(deliveries_.data(), 0, n * sizeof(unsigned), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(consumed_.data(), 0, consumed_.bytes(), stream_.get()), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(stats_.data(), 0, stats_.bytes(), stream_.get()), cudaSuccess);
  }

  ContentionArgs Args(const WorkQueue& queue, PopMode mode, unsigned batch, std::uint64_t n) {
    ContentionArgs args;
    args.queue = queue.device_view();
    args.mode = mode;
    args.batch = batch;
    args.total_items = n;
    args.deliveries = deliveries_.data();
    args.consumed = consumed_.data();
    args.stats = stats_.data();
    args.budget_ns = 15'000'000'000ull;  // a bound against a livelock, not a timing assertion
    return args;
  }

  std::vector<unsigned long long> Stats() {
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    return testing::Download(stats_);
  }

  // Lost and duplicated ids among [0, n) (exact, from the per-id counters),
  // plus the consumers' phantom/corrupted/unexpected counts.
  void ExpectExactlyOnce(std::uint64_t n, const std::string& what) {
    ASSERT_EQ(cudaMemsetAsync(verdict_.data(), 0, verdict_.bytes(), stream_.get()), cudaSuccess);
    ASSERT_EQ(test::EnqueueCountDeliveries(deliveries_.data(), n, verdict_.data(), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    std::vector<unsigned long long> verdict(2);
    BATON_ASSERT_OK(verdict_.CopyTo(absl::MakeSpan(verdict)));
    const std::vector<unsigned long long> stats = Stats();
    EXPECT_EQ(verdict[0], 0u) << what << ": lost items";
    EXPECT_EQ(verdict[1], 0u) << what << ": duplicated deliveries";
    EXPECT_EQ(stats[test::kPhantom], 0u) << what << ": phantom items";
    EXPECT_EQ(stats[test::kCorrupted], 0u) << what << ": corrupted descriptors";
    EXPECT_EQ(stats[test::kUnexpected], 0u) << what << ": unexpected terminate";
    EXPECT_EQ(stats[test::kOutOfTime], 0u) << what << ": warps ran out of time (no progress)";
  }

  // Full contention: 8 resident blocks of 256 threads on every SM.
  void RunContention(PopMode mode, unsigned batch, std::uint64_t n, std::uint64_t capacity,
                     std::uint64_t first_ticket) {
    const std::string what =
        absl::StrCat("mode ", static_cast<int>(mode), " batch ", batch, " capacity ", capacity,
                     " first ticket ", first_ticket, " items ", n);
    int per_sm = 0;
    ASSERT_EQ(test::ProduceConsumeBlocksPerSm(mode, &per_sm), cudaSuccess);
    ASSERT_GE(per_sm, 8) << what << ": the contention kernel must keep 8 blocks per SM resident";
    WorkQueueOptions options;
    options.capacity = capacity;
    options.max_batch = static_cast<std::uint32_t>(std::min<std::uint64_t>(2048, capacity));
    options.first_ticket = first_ticket;
    BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
    PrepareDeliveries(n);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    const auto started = std::chrono::steady_clock::now();
    ASSERT_EQ(test::EnqueueProduceConsume(Args(queue, mode, batch, n), 8 * device_.multiprocessors,
                                          stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("  %s: %.3f s (%.3g pushes+pops/s)\n", what.c_str(), seconds, n / seconds);
    BATON_EXPECT_OK(queue.CheckDeviceError());
    ExpectExactlyOnce(n, what);
    BATON_ASSERT_OK_AND_ASSIGN(const std::uint64_t size, queue.Size());
    EXPECT_EQ(size, 0u) << what;
    std::uint64_t consumed = 0;
    ASSERT_EQ(cudaMemcpy(&consumed, consumed_.data(), sizeof(consumed), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(consumed, n) << what;
  }

  std::mt19937_64 rng_;
  ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, testing::TestSeedNote()};
  DeviceInfo device_;
  DeviceBuffer<unsigned> deliveries_;
  DeviceBuffer<unsigned long long> consumed_;
  DeviceBuffer<unsigned long long> stats_;
  DeviceBuffer<unsigned long long> verdict_;
};

// >= 1e8 pops per batch size at full contention (8 x 256 threads on every SM,
// each warp pushing and popping); the 16384-slot ring wraps about 6000 times
// per batch size, and every run crosses ticket 2^32.
constexpr std::uint64_t kSweepItems = 100'000'000;
constexpr std::uint64_t kSweepCapacity = 1u << 14;
TEST_F(WorkQueueGpuTest, ExactlyOnceUnderFullContentionBatch1) {
  RunContention(PopMode::kWarp1, 1, kSweepItems, kSweepCapacity, k2To32 - kSweepItems / 2);
}
TEST_F(WorkQueueGpuTest, ExactlyOnceUnderFullContentionBatch8) {
  RunContention(PopMode::kWarp1, 8, kSweepItems, kSweepCapacity, k2To32 - kSweepItems / 2);
}
TEST_F(WorkQueueGpuTest, ExactlyOnceUnderFullContentionBatch32) {
  RunContention(PopMode::kWarp1, 32, kSweepItems, kSweepCapacity, k2To32 - kSweepItems / 2);
}
TEST_F(WorkQueueGpuTest, ExactlyOnceUnderFullContentionBatch64) {
  RunContention(PopMode::kWarp2, 64, kSweepItems, kSweepCapacity, k2To32 - kSweepItems / 2);
}
TEST_F(WorkQueueGpuTest, ExactlyOnceUnderFullContentionBatch256) {
  RunContention(PopMode::kWarp8, 256, kSweepItems, kSweepCapacity, k2To32 - kSweepItems / 2);
}

TEST_F(WorkQueueGpuTest, ExactlyOnceWithPerThreadAndBlockPops) {
  constexpr std::uint64_t kItems = 20'000'000;
  RunContention(PopMode::kSingle, 32, kItems, 1u << 12, k2To32 - 12345);
  if (HasFatalFailure()) return;
  RunContention(PopMode::kBlock8, 2048, kItems, 1u << 14, rng_());
}

// Tickets cross 2^64 (and wrap to 0) while every SM pushes and pops.
TEST_F(WorkQueueGpuTest, TicketsWrapAcross2To64) {
  constexpr std::uint64_t kItems = 1u << 23;
  const std::uint64_t first = ~std::uint64_t{0} - kItems / 2 + 1;
  RunContention(PopMode::kWarp1, 32, kItems, 1u << 12, first);
  if (HasFatalFailure()) return;
  RunContention(PopMode::kWarp8, 256, kItems, 1u << 13, first + 7);
}

// The host seeds (in chunks, retrying what a full ring refused) while a
// consumer grid pops; then Close() makes every consumer warp terminate.
TEST_F(WorkQueueGpuTest, HostSeedsWhileDeviceConsumesThenCloseTerminatesEveryWarp) {
  constexpr std::uint64_t kItems = 1u << 23;
  WorkQueueOptions options;
  options.capacity = 1u << 14;
  options.max_batch = 32;
  options.first_ticket = k2To32 - (rng_() % kItems);
  BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
  PrepareDeliveries(kItems);
  std::vector<std::uint32_t> order(kItems);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng_);
  std::vector<WorkItem> items(kItems);
  for (std::uint64_t i = 0; i < kItems; ++i) items[i] = TestItem(order[i]);

  // Two blocks per SM: the seed kernel (one block) always finds a free slot.
  const int blocks = 2 * device_.multiprocessors;
  ContentionArgs args = Args(queue, PopMode::kWarp1, 32, kItems);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  ASSERT_EQ(test::EnqueueConsumeUntilTerminate(args, blocks, stream_.get()), cudaSuccess);

  std::uint64_t seeded = 0;
  int refusals = 0;
  // Consumers give up after budget_ns; past that a full ring would refuse
  // forever, so the host side is bounded too.
  const testing::Deadline deadline(std::chrono::seconds(20));
  while (seeded < kItems) {
    ASSERT_FALSE(deadline.passed())
        << "seeding made no progress: seeded " << seeded << " of " << kItems;
    const std::uint64_t chunk =
        std::min<std::uint64_t>(kItems - seeded, 1 + rng_() % (3 * options.capacity));
    std::size_t accepted = 0;
    const absl::Status status =
        queue.Seed(absl::MakeConstSpan(items).subspan(seeded, chunk), &accepted);
    if (!status.ok()) {
      ASSERT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
      EXPECT_NE(
          std::string(status.message()).find(absl::StrCat("accepted ", accepted, " of ", chunk)),
          std::string::npos)
          << status;
      ++refusals;
    } else {
      ASSERT_EQ(accepted, chunk);
    }
    seeded += accepted;
  }
  BATON_ASSERT_OK(queue.Close());
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  BATON_EXPECT_OK(queue.CheckDeviceError());
  ExpectExactlyOnce(kItems, "host seeding");
  const std::vector<unsigned long long> stats = Stats();
  EXPECT_EQ(stats[test::kTerminated],
            static_cast<unsigned long long>(blocks) * test::kContentionThreads / 32)
      << "every consumer warp must see the terminate sentinel";
  BATON_ASSERT_OK_AND_ASSIGN(const std::uint64_t size, queue.Size());
  EXPECT_EQ(size, 0u);
  RecordProperty("full_ring_refusals", refusals);
}

// Lanes exit at random rounds; the survivors' pops must hand out exactly what
// a scalar model of the ranked, strided distribution says.
TEST_F(WorkQueueGpuTest, PartiallyActiveWarpsMatchScalarReference) {
  constexpr unsigned kRounds = 12;
  for (int trial = 0; trial < 20; ++trial) {
    const unsigned stock = 40 + static_cast<unsigned>(rng_() % 300);
    const unsigned max_items = 1 + static_cast<unsigned>(rng_() % 64);
    WorkQueueOptions options;
    options.capacity = 512;
    options.max_batch = 48;  // clamps some claims
    options.first_ticket = rng_();
    BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
    std::vector<WorkItem> items(stock);
    for (unsigned i = 0; i < stock; ++i) items[i] = TestItem(static_cast<std::uint32_t>(rng_()));
    BATON_ASSERT_OK(queue.Seed(items));
    std::vector<unsigned> exit_round(32);
    for (unsigned& r : exit_round) r = static_cast<unsigned>(rng_() % (kRounds + 1));
    exit_round[rng_() % 32] = kRounds;  // at least one lane stays to the end

    BATON_ASSERT_OK_AND_ASSIGN(auto exit_dev, DeviceBuffer<unsigned>::Create(32));
    BATON_ASSERT_OK(exit_dev.CopyFrom(exit_round));
    BATON_ASSERT_OK_AND_ASSIGN(auto out, DeviceBuffer<WorkItem>::Create(kRounds * 32 * 2));
    BATON_ASSERT_OK(out.Fill(0x5a));  // poison: neither a valid item nor a sentinel
    BATON_ASSERT_OK_AND_ASSIGN(auto masks, DeviceBuffer<unsigned>::Create(kRounds));
    BATON_ASSERT_OK(masks.Fill(0));
    ASSERT_EQ(test::EnqueueLaneExitPops(queue.device_view(), exit_dev.data(), max_items, kRounds,
                                        out.data(), masks.data(), stream_.get()),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    BATON_ASSERT_OK(queue.CheckDeviceError());
    std::vector<WorkItem> got(kRounds * 32 * 2);
    BATON_ASSERT_OK(out.CopyTo(absl::MakeSpan(got)));
    std::vector<unsigned> seen_masks(kRounds);
    BATON_ASSERT_OK(masks.CopyTo(absl::MakeSpan(seen_masks)));

    unsigned next = 0;
    for (unsigned r = 0; r < kRounds; ++r) {
      unsigned active = 0;
      for (unsigned l = 0; l < 32; ++l) active |= (exit_round[l] > r ? 1u : 0u) << l;
      if (active == 0) break;
      ASSERT_EQ(seen_masks[r], active) << "round " << r << ": the warp did not reconverge";
      const unsigned lanes = static_cast<unsigned>(__builtin_popcount(active));
      const unsigned want = std::min({max_items, 2 * lanes, options.max_batch});
      const unsigned count = std::min(want, stock - next);
      for (unsigned l = 0; l < 32; ++l) {
        if (!(active >> l & 1u)) continue;
        const unsigned rank = static_cast<unsigned>(__builtin_popcount(active & ((1u << l) - 1)));
        for (unsigned j = 0; j < 2; ++j) {
          const unsigned index = rank + j * lanes;
          const WorkItem expected = index < count ? items[next + index] : WorkItem::invalid();
          const WorkItem& actual = got[(r * 32 + l) * 2 + j];
          ASSERT_TRUE(SameItem(actual, expected))
              << "trial " << trial << " round " << r << " lane " << l << " item " << j << ": got "
              << Describe(actual) << ", expected " << Describe(expected);
        }
      }
      next += count;
    }
    BATON_ASSERT_OK_AND_ASSIGN(const std::uint64_t size, queue.Size());
    EXPECT_EQ(size, stock - next);
  }
}

// One consumer sees the seeded items in FIFO order, then "empty", then after
// Close the terminate sentinel.
TEST_F(WorkQueueGpuTest, SingleConsumerSeesFifoThenEmptyThenTerminate) {
  WorkQueueOptions options;
  options.capacity = 64;
  options.max_batch = 8;
  options.first_ticket = k2To32 - 20;
  BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
  std::vector<WorkItem> items;
  for (int i = 0; i < 50; ++i) items.push_back(TestItem(static_cast<std::uint32_t>(rng_())));
  BATON_ASSERT_OK(queue.Seed(items));
  BATON_ASSERT_OK_AND_ASSIGN(auto out, DeviceBuffer<WorkItem>::Create(52));
  BATON_ASSERT_OK(out.Fill(0x5a));
  ASSERT_EQ(test::EnqueuePopSingle(queue.device_view(), out.data(), 52, stream_.get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  std::vector<WorkItem> got(52);
  BATON_ASSERT_OK(out.CopyTo(absl::MakeSpan(got)));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(SameItem(got[i], items[i])) << i << ": " << Describe(got[i]);
  }
  EXPECT_FALSE(got[50].is_valid());
  EXPECT_FALSE(got[50].is_terminate()) << "an open, empty queue says 'no item', not terminate";
  EXPECT_FALSE(got[51].is_valid());

  BATON_ASSERT_OK(queue.Close());
  ASSERT_EQ(test::EnqueuePopSingle(queue.device_view(), out.data(), 2, stream_.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  BATON_ASSERT_OK(out.CopyTo(absl::MakeSpan(got)));
  EXPECT_TRUE(got[0].is_terminate());
  EXPECT_TRUE(got[1].is_terminate());
  const absl::Status after_close = queue.Seed(items);
  EXPECT_EQ(after_close.code(), absl::StatusCode::kFailedPrecondition) << after_close;
  EXPECT_NE(std::string(after_close.message()).find("after Close()"), std::string::npos)
      << after_close;
  BATON_EXPECT_OK(queue.CheckDeviceError());
}

// A full ring refuses: the host learns how many were accepted (a prefix), the
// rest can be seeded later, and Drain returns everything in FIFO order.
TEST_F(WorkQueueGpuTest, FullQueueRefusesSeedAndDrainReturnsEverythingInOrder) {
  WorkQueueOptions options;
  options.capacity = 1024;
  options.max_batch = 256;
  options.first_ticket = ~std::uint64_t{0} - 500;  // the drain crosses 2^64
  BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
  std::vector<WorkItem> items;
  for (int i = 0; i < 1500; ++i) items.push_back(TestItem(static_cast<std::uint32_t>(i * 7 + 3)));
  std::size_t accepted = 12345;
  const absl::Status full = queue.Seed(items, &accepted);
  ASSERT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(accepted, 1024u);
  EXPECT_NE(std::string(full.message()).find("accepted 1024 of 1500 items"), std::string::npos)
      << full;
  BATON_ASSERT_OK_AND_ASSIGN(std::uint64_t size, queue.Size());
  EXPECT_EQ(size, 1024u);

  BATON_ASSERT_OK_AND_ASSIGN(std::vector<WorkItem> drained, queue.Drain());
  ASSERT_EQ(drained.size(), 1024u);
  for (std::size_t i = 0; i < drained.size(); ++i) {
    ASSERT_TRUE(SameItem(drained[i], items[i])) << i << ": " << Describe(drained[i]);
  }
  BATON_ASSERT_OK(queue.Seed(absl::MakeConstSpan(items).subspan(1024)));
  BATON_ASSERT_OK(queue.Close());  // drain works on a closed queue
  BATON_ASSERT_OK_AND_ASSIGN(drained, queue.Drain());
  ASSERT_EQ(drained.size(), 476u);
  for (std::size_t i = 0; i < drained.size(); ++i) {
    ASSERT_TRUE(SameItem(drained[i], items[1024 + i])) << i;
  }
  BATON_ASSERT_OK_AND_ASSIGN(size, queue.Size());
  EXPECT_EQ(size, 0u);
  BATON_EXPECT_OK(queue.CheckDeviceError());
}

// Device pushes into a ring that runs full: each lane learns whether its item
// was accepted, the ring holds exactly the accepted set, and the host can top
// it up to exactly `capacity` (a concurrent over-claim may refuse a device
// push early, so the device count alone is only bounded by the capacity).
TEST_F(WorkQueueGpuTest, DevicePushRefusesWhenFullAndAfterClose) {
  constexpr unsigned kPushes = 3000;
  constexpr std::uint64_t kCapacity = 1024;
  WorkQueueOptions options;
  options.capacity = kCapacity;
  options.max_batch = 1024;
  options.first_ticket = rng_();
  BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
  BATON_ASSERT_OK_AND_ASSIGN(auto accepted, DeviceBuffer<unsigned>::Create(kPushes));
  BATON_ASSERT_OK(accepted.Fill(0x7f));
  ASSERT_EQ(test::EnqueueDevicePush(queue.device_view(), kPushes, accepted.data(), stream_.get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  std::vector<unsigned> flags(kPushes);
  BATON_ASSERT_OK(accepted.CopyTo(absl::MakeSpan(flags)));
  std::vector<unsigned> expected_ids;
  for (unsigned id = 0; id < kPushes; ++id) {
    ASSERT_LE(flags[id], 1u) << "id " << id << " never reported";
    if (flags[id] == 1) expected_ids.push_back(id);
  }
  ASSERT_LE(expected_ids.size(), kCapacity);
  ASSERT_GT(expected_ids.size(), 0u);
  BATON_ASSERT_OK_AND_ASSIGN(const std::uint64_t device_size, queue.Size());
  EXPECT_EQ(device_size, expected_ids.size());

  const std::uint64_t room = kCapacity - expected_ids.size();
  std::vector<WorkItem> top_up;
  for (std::uint64_t i = 0; i < room + 5; ++i) {
    top_up.push_back(TestItem(static_cast<std::uint32_t>(10000 + i)));
  }
  std::size_t topped = 0;
  const absl::Status full = queue.Seed(top_up, &topped);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  ASSERT_EQ(topped, room);
  for (std::uint64_t i = 0; i < room; ++i) expected_ids.push_back(static_cast<unsigned>(10000 + i));

  BATON_ASSERT_OK_AND_ASSIGN(std::vector<WorkItem> drained, queue.Drain());
  std::vector<unsigned> drained_ids;
  for (const WorkItem& item : drained) {
    ASSERT_TRUE(SameItem(item, TestItem(item.id))) << Describe(item);
    drained_ids.push_back(item.id);
  }
  std::sort(drained_ids.begin(), drained_ids.end());
  EXPECT_EQ(drained_ids, expected_ids);

  BATON_ASSERT_OK(queue.Close());
  BATON_ASSERT_OK(accepted.Fill(0x7f));
  ASSERT_EQ(test::EnqueueDevicePush(queue.device_view(), 64, accepted.data(), stream_.get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  BATON_ASSERT_OK(accepted.CopyTo(absl::MakeSpan(flags)));
  for (unsigned id = 0; id < 64; ++id) EXPECT_EQ(flags[id], 0u) << "push after close accepted";
  BATON_ASSERT_OK_AND_ASSIGN(const std::uint64_t size, queue.Size());
  EXPECT_EQ(size, 0u);
  BATON_EXPECT_OK(queue.CheckDeviceError());
}

// A ticket whose producer never publishes: the consumer's wait is bounded and
// ends in the queue's error word, not in a hang.
TEST_F(WorkQueueGpuTest, AbandonedTicketEndsInBoundedWaitError) {
  WorkQueueOptions options;
  options.capacity = 16;
  options.max_batch = 4;
  options.max_wait_spins = 2000;
  BATON_ASSERT_OK_AND_ASSIGN(WorkQueue queue, WorkQueue::Create(options));
  ASSERT_EQ(test::EnqueueAbandonTicket(queue.device_view(), stream_.get()), cudaSuccess);
  BATON_ASSERT_OK_AND_ASSIGN(auto out, DeviceBuffer<WorkItem>::Create(1));
  ASSERT_EQ(test::EnqueuePopSingle(queue.device_view(), out.data(), 1, stream_.get()), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  std::vector<WorkItem> got(1);
  BATON_ASSERT_OK(out.CopyTo(absl::MakeSpan(got)));
  EXPECT_FALSE(got[0].is_valid());
  const absl::Status error = queue.CheckDeviceError();
  EXPECT_EQ(error.code(), absl::StatusCode::kInternal) << error;
  EXPECT_NE(std::string(error.message()).find("bounded wait on a work-queue slot"),
            std::string::npos)
      << error;
  EXPECT_NE(std::string(error.message()).find("code 1"), std::string::npos) << error;
  BATON_ASSERT_OK(queue.Reset());
  BATON_EXPECT_OK(queue.CheckDeviceError());
}

}  // namespace
}  // namespace baton
