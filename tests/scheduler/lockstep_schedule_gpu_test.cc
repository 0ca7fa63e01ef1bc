// Tensor-parallel ranks' device schedulers in lockstep (baton/lockstep_group.h,
// scheduler/lockstep_step.cuh), end to end through Runtime: each rank runs
// the recording step program (token_schedule_test_kernels.h: every step's
// header and positions, items finishing like decoder requests); rank 0 takes
// the work and decides, the others follow. Checked on the tail-launch and
// conditional engines: every follower records exactly rank 0's steps (step,
// batch, rows, bucket, every position's item, slot, tokens so far, tokens and
// first row) and runs as many; every item completes once on rank 0 with its
// value; a follower whose host starts it late still runs every step; a
// follower that never starts stops rank 0 within its patience with an error
// naming the rank, and Abort then hands every item back; building graphs on
// a GPU where another rank's loop runs is refused rather than hung; and the
// refusals.
// Ranks share GPU 0 (blocks of different kernels), and with 2 or more GPUs
// (else skipped) run one per GPU, the channel read over peer access.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "baton/cuda_resources.h"
#include "baton/lockstep_group.h"
#include "baton/runtime.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"
#include "token_schedule_test_kernels.h"

namespace baton {
namespace {

using test::RecordedPosition;

constexpr std::uint32_t kMaxBatch = 40;  // above a warp: the admissions take two pops
constexpr std::uint32_t kMaxSteps = 4096;
const TokenPolicy kPolicy{64, 0};  // chunks of up to 64 rows: prompts read over several steps

// One rank: its runtime on its GPU and the steps its program recorded.
struct Rank {
  int device = 0;
  DeviceBuffer<StepHeader> headers;
  DeviceBuffer<RecordedPosition> positions;
  std::unique_ptr<Runtime> runtime;
};

class LockstepScheduleTest : public testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudaGetDeviceCount(&gpus_), cudaSuccess);
    rng_.seed(testing::TestSeed());
  }
  void TearDown() override {
    ranks_.clear();  // (each runtime on its own GPU)
    (void)cudaSetDevice(0);
    GpuTest::TearDown();
  }

  // The devices of a run: `ranks` ranks on GPU 0, or one per GPU.
  std::vector<int> Devices(int ranks, bool across) const {
    std::vector<int> d(ranks, 0);
    if (across) {
      for (int r = 0; r < ranks; ++r) d[r] = r;
    }
    return d;
  }

  // The group and each rank's runtime with the recording program.
  void MakeRanks(const std::vector<int>& devices, absl::Duration patience) {
    LockstepGroupOptions o;
    o.devices = devices;
    o.max_batch = kMaxBatch;
    o.max_tokens = kPolicy.max_tokens_per_step;
    o.patience = patience;
    BATON_ASSERT_OK_AND_ASSIGN(group_, LockstepGroup::Create(o));
    std::vector<std::uint32_t> buckets;
    for (std::uint32_t b = 1; b < kPolicy.max_tokens_per_step; b *= 2) buckets.push_back(b);
    buckets.push_back(kPolicy.max_tokens_per_step);
    ranks_.clear();
    ranks_.resize(devices.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      Rank& k = ranks_[r];
      k.device = devices[r];
      ASSERT_EQ(cudaSetDevice(k.device), cudaSuccess);
      BATON_ASSERT_OK_AND_ASSIGN(k.headers, DeviceBuffer<StepHeader>::Create(kMaxSteps));
      BATON_ASSERT_OK_AND_ASSIGN(
          k.positions, DeviceBuffer<RecordedPosition>::Create(std::size_t{kMaxSteps} * kMaxBatch));
      BATON_ASSERT_OK(k.headers.Fill(0xFF));  // poison: steps never recorded stay so
      BATON_ASSERT_OK(k.positions.Fill(0xFF));
      StepProgram program;
      program.name = "recording";
      program.buckets = buckets;
      program.max_batch = kMaxBatch;
      program.tokens = kPolicy;
      StepHeader* h = k.headers.data();
      RecordedPosition* p = k.positions.data();
      program.enqueue = [h, p](const StepContext& ctx, cudaStream_t stream) {
        return CudaStatus(
            test::EnqueueRecordingStep(ctx.args, ctx.bucket_size, h, p, kMaxSteps, stream),
            "recording step", __FILE__, __LINE__);
      };
      RuntimeOptions options;
      options.lockstep = group_;
      options.lockstep_rank = static_cast<int>(r);
      BATON_ASSERT_OK_AND_ASSIGN(k.runtime, Runtime::Create(options));
      BATON_ASSERT_OK(k.runtime->RegisterStepProgram(program));
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }

  Runtime& runtime(int r) {
    EXPECT_EQ(cudaSetDevice(ranks_[r].device), cudaSuccess);
    return *ranks_[r].runtime;
  }

  std::vector<WorkItem> Items(std::uint32_t count) {
    std::vector<WorkItem> items;
    for (std::uint32_t i = 0; i < count; ++i) {
      items.push_back(
          WorkItem::make(7, i, std::uniform_int_distribution<std::uint32_t>(1, 150)(rng_)));
    }
    return items;
  }

  // Starts the followers (the first of them `delay` late, on another host
  // thread's schedule), then rank 0; runs `items` through rank 0 and stops
  // every rank; checks what each rank recorded against rank 0.
  void RunAndCompare(Engine engine, std::size_t items_count, std::chrono::milliseconds delay) {
    SCOPED_TRACE(testing::TestSeedNote());
    const std::vector<WorkItem> items = Items(static_cast<std::uint32_t>(items_count));
    const int ranks = static_cast<int>(ranks_.size());
    // Every rank's graphs first: ranks may share a GPU (Runtime::Prepare).
    for (int r = 0; r < ranks; ++r) BATON_ASSERT_OK(runtime(r).Prepare(engine));
    for (int r = 2; r < ranks; ++r) BATON_ASSERT_OK(runtime(r).Start(engine));
    BATON_ASSERT_OK(runtime(0).Submit(items));
    BATON_ASSERT_OK(runtime(0).Start(engine));
    std::this_thread::sleep_for(delay);
    BATON_ASSERT_OK(runtime(1).Start(engine));
    testing::Polled polled;
    ASSERT_NO_FATAL_FAILURE(
        polled = testing::PollCompletions(
            runtime(0), items.size(), {std::chrono::seconds(30), 256}, [](const Completion& done) {
              ASSERT_EQ(done.value, test::OutputsOf(done.id)) << "item " << done.id;
            }));
    BATON_ASSERT_OK(polled.failure);
    ASSERT_EQ(polled.completions, items.size()) << "items missing";
    BATON_ASSERT_OK(runtime(0).Stop().status());
    for (int r = 1; r < ranks; ++r) {
      BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime(r).Stop());
      EXPECT_TRUE(report.completions.empty()) << "rank " << r << " completed items itself";
    }
    const std::uint64_t steps = runtime(0).stats().steps;
    ASSERT_GT(steps, 0u);
    ASSERT_LT(steps, kMaxSteps);
    std::vector<std::vector<StepHeader>> headers(ranks, std::vector<StepHeader>(kMaxSteps));
    std::vector<std::vector<RecordedPosition>> positions(
        ranks, std::vector<RecordedPosition>(std::size_t{kMaxSteps} * kMaxBatch));
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(cudaSetDevice(ranks_[r].device), cudaSuccess);
      BATON_ASSERT_OK(ranks_[r].headers.CopyTo(absl::MakeSpan(headers[r])));
      BATON_ASSERT_OK(ranks_[r].positions.CopyTo(absl::MakeSpan(positions[r])));
    }
    for (int r = 1; r < ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      EXPECT_EQ(runtime(r).stats().steps, steps);
      for (std::uint64_t s = 0; s < steps; ++s) {
        const StepHeader& want = headers[0][s];
        const StepHeader& got = headers[r][s];
        ASSERT_EQ(want.step, s) << "rank 0 did not record step " << s;
        ASSERT_TRUE(got.step == want.step && got.batch == want.batch && got.tokens == want.tokens &&
                    got.bucket == want.bucket && got.bucket_size == want.bucket_size)
            << "step " << s << ": rank 0 ran batch " << want.batch << ", rows " << want.tokens
            << ", bucket " << want.bucket << "; this rank step " << got.step << ", batch "
            << got.batch << ", rows " << got.tokens << ", bucket " << got.bucket;
        for (std::uint32_t p = 0; p < want.batch; ++p) {
          const RecordedPosition& a = positions[0][s * kMaxBatch + p];
          const RecordedPosition& b = positions[r][s * kMaxBatch + p];
          ASSERT_TRUE(a.id == b.id && a.slot == b.slot && a.item_tokens == b.item_tokens &&
                      a.tokens == b.tokens && a.offset == b.offset)
              << "step " << s << ", position " << p;
        }
      }
      EXPECT_EQ(headers[r][steps].step, ~0ull) << "a step rank 0 never ran";
    }
  }

  int gpus_ = 0;
  std::mt19937_64 rng_;
  std::shared_ptr<const LockstepGroup> group_;
  std::vector<Rank> ranks_;
};

TEST_F(LockstepScheduleTest, OneGpuEveryFollowerRunsRankZerosStepsTailLaunch) {
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(3, false), absl::Seconds(5)));
  RunAndCompare(Engine::kTailLaunch, 300, std::chrono::milliseconds(0));
}
TEST_F(LockstepScheduleTest, OneGpuEveryFollowerRunsRankZerosStepsConditional) {
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(3, false), absl::Seconds(5)));
  RunAndCompare(Engine::kConditional, 300, std::chrono::milliseconds(0));
}
TEST_F(LockstepScheduleTest, OneGpuAFollowerStartedLateStillRunsEveryStep) {
  // Rank 0 waits for it (two steps ahead at most) well within its patience.
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(2, false), absl::Seconds(5)));
  RunAndCompare(Engine::kTailLaunch, 200, std::chrono::milliseconds(400));
}
TEST_F(LockstepScheduleTest, AcrossGpusEveryFollowerRunsRankZerosSteps) {
  // The suite counts only this form of skip as expected (scripts/summarize_gpu_suite.py).
  if (gpus_ < 2) GTEST_SKIP() << "multi-GPU: one GPU visible, the cross-GPU lockstep needs 2";
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(std::min(gpus_, 4), true), absl::Seconds(5)));
  RunAndCompare(Engine::kTailLaunch, 300, std::chrono::milliseconds(300));
}

TEST_F(LockstepScheduleTest, AFollowerThatNeverStartsStopsRankZeroNamingIt) {
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(2, false), absl::Milliseconds(200)));
  const std::vector<WorkItem> items = Items(100);
  BATON_ASSERT_OK(runtime(0).Submit(items));
  const auto start = std::chrono::steady_clock::now();
  BATON_ASSERT_OK(runtime(0).Start(Engine::kTailLaunch));
  absl::Status failure;
  std::size_t completed = 0;
  std::vector<Completion> out(256);
  while (failure.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    const absl::StatusOr<std::size_t> n = runtime(0).Poll(absl::MakeSpan(out));
    if (!n.ok()) failure = n.status();
    if (n.ok()) completed += *n;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Record 3 needs rank 1's copy of record 1: rank 0 waits its patience, then faults.
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(failure.code(), absl::StatusCode::kAborted) << failure;
  EXPECT_NE(failure.message().find("rank 1"), absl::string_view::npos) << failure;
  // Nothing is lost: what did not complete comes back from Abort or stays queued.
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime(0).Abort());
  EXPECT_EQ(completed + report.completions.size() + report.in_flight.size() + report.still_queued,
            items.size());
}

TEST_F(LockstepScheduleTest, BuildingGraphsWhereAnotherRankRunsIsRefusedNotHung) {
  // Unrefused, rank 0's Start would instantiate its conditional graphs behind
  // rank 1's waiting scheduler on the same GPU and never return.
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(2, false), absl::Seconds(1)));
  BATON_ASSERT_OK(runtime(1).Start(Engine::kConditional));
  for (const absl::Status& refused :
       {runtime(0).Start(Engine::kConditional), runtime(0).Prepare(Engine::kConditional)}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(refused.message().find("where rank 1's loop runs"), absl::string_view::npos)
        << refused;
    EXPECT_NE(refused.message().find("Runtime::Prepare(engine) on every rank"),
              absl::string_view::npos)
        << refused;
  }
  EXPECT_FALSE(runtime(0).running());
  // Rank 1 leaves on its own abort; then rank 0 builds.
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime(1).Abort());
  EXPECT_TRUE(report.in_flight.empty());
  BATON_EXPECT_OK(runtime(0).Prepare(Engine::kConditional));
  BATON_EXPECT_OK(runtime(0).Prepare(Engine::kConditional));  // once; then nothing to do
}

TEST_F(LockstepScheduleTest, Refusals) {
  ASSERT_NO_FATAL_FAILURE(MakeRanks(Devices(2, false), absl::Seconds(1)));
  const absl::Status follower = runtime(1).Submit(Items(1));
  EXPECT_EQ(follower.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(follower.message().find("submit work to rank 0"), absl::string_view::npos) << follower;

  RuntimeOptions no_group;
  no_group.lockstep_rank = 1;
  EXPECT_EQ(Runtime::Create(no_group).status().code(), absl::StatusCode::kInvalidArgument);
  RuntimeOptions past;
  past.lockstep = group_;
  past.lockstep_rank = 2;
  const absl::Status out_of_range = Runtime::Create(past).status();
  EXPECT_EQ(out_of_range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out_of_range.message().find("the group has 2 ranks"), absl::string_view::npos)
      << out_of_range;

  LockstepGroupOptions one;
  one.devices = {0};
  EXPECT_EQ(LockstepGroup::Create(one).status().code(), absl::StatusCode::kInvalidArgument);
  LockstepGroupOptions missing;
  missing.devices = {0, gpus_};
  EXPECT_EQ(LockstepGroup::Create(missing).status().code(), absl::StatusCode::kInvalidArgument);

  // A program whose steps do not fit the group's records.
  RuntimeOptions small_rank;
  small_rank.lockstep = group_;
  small_rank.lockstep_rank = 1;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(small_rank));
  StepProgram big;
  big.name = "too big";
  big.buckets = {256};
  big.max_batch = 256;
  big.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  const absl::Status too_big = runtime->RegisterStepProgram(big);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find("LockstepGroupOptions"), absl::string_view::npos) << too_big;
  if (gpus_ >= 2) {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    const absl::Status wrong_gpu = Runtime::Create(small_rank).status();
    EXPECT_EQ(wrong_gpu.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(wrong_gpu.message().find("cudaSetDevice(0)"), absl::string_view::npos) << wrong_gpu;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
}

}  // namespace
}  // namespace baton
