// The dynamic-parallelism engine on the GPU, with the synthetic device step
// program (K kernels per step, each folding into a per-item accumulator, so a
// completion's value proves every kernel of every step ran once, in order):
// exact step and launch counts, batches above every bucket, identical results
// on every engine, drain and restart, abort, a device-launch limit hit on
// purpose, and Start without a device step.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "baton/runtime.h"
#include "fixtures/synthetic_step.h"
#include "support/completion_ledger.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"

namespace baton {
namespace {

constexpr std::uint32_t kKind = 1;

class DynamicParallelismTest : public testing::SeededGpuTest<std::mt19937> {
 protected:
  void SetUp() override {
    SeededGpuTest::SetUp();
    if (IsSkipped()) return;
    RecordProperty("seed", std::to_string(testing::TestSeed()));
  }

  absl::StatusOr<std::unique_ptr<Runtime>> MakeRuntime(const RuntimeOptions& options,
                                                       std::uint32_t kernels,
                                                       std::vector<std::uint32_t> buckets) {
    kernels_ = kernels;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::Create(options));
    SyntheticStepOptions synthetic;
    synthetic.kernels = kernels;
    synthetic.max_batch = options.max_batch;
    synthetic.buckets = std::move(buckets);
    BATON_ASSIGN_OR_RETURN(StepProgram program, SyntheticStepProgram(synthetic));
    BATON_RETURN_IF_ERROR(runtime->RegisterStepProgram(std::move(program)));
    return runtime;
  }

  std::vector<WorkItem> MakeItems(std::uint32_t first_id, std::uint32_t count,
                                  std::uint32_t max_steps) {
    return ledger_.MakeItems(rng_, kKind, first_id, count, 1, max_steps);
  }

  std::uint32_t kernels_ = 0;
  // Checks each completion against the host reference of the synthetic chain.
  testing::CompletionLedger ledger_{[this](std::uint32_t id, std::uint32_t steps) {
    return SyntheticExpectedValue(id, steps, kernels_);
  }};
};

// One item of N steps: exactly N steps, and each step exactly K kernel
// launches plus the scheduler's own launch. Then Stop, Start, and N more.
TEST_F(DynamicParallelismTest, RunsExactlyNStepsWithKPlusOneLaunchesEach) {
  constexpr std::uint32_t kKernels = 3;
  constexpr std::uint32_t kSteps = 300;
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, kKernels, {}));
  const WorkItem first = WorkItem::make(kKind, 1, kSteps);
  ledger_.Expect(1, kSteps);
  BATON_ASSERT_OK(runtime->Submit(absl::MakeConstSpan(&first, 1)));
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  ledger_.PollUntil(*runtime, 1);
  BATON_ASSERT_OK_AND_ASSIGN(StopReport report, runtime->Stop());
  EXPECT_TRUE(report.completions.empty());
  EXPECT_EQ(report.still_queued, 0u);
  RuntimeStats stats = runtime->stats();
  EXPECT_EQ(stats.steps, kSteps);
  EXPECT_EQ(stats.admitted, 1u);
  EXPECT_EQ(stats.completed, 1u);
  EXPECT_EQ(stats.device_launches, kSteps * (kKernels + 1));
  EXPECT_EQ(stats.engine_exits, stats.engine_launches);

  // Restart: the counters go on from where they were.
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  const WorkItem second = WorkItem::make(kKind, 2, 50);
  ledger_.Expect(2, 50);
  BATON_ASSERT_OK(runtime->Submit(absl::MakeConstSpan(&second, 1)));
  ledger_.PollUntil(*runtime, 2);
  BATON_ASSERT_OK(runtime->Stop().status());
  stats = runtime->stats();
  EXPECT_EQ(stats.steps, kSteps + 50);
  EXPECT_EQ(stats.admitted, 2u);
  EXPECT_EQ(stats.completed, 2u);
  EXPECT_EQ(stats.device_launches, (kSteps + 50) * (kKernels + 1));
}

// max_batch above the largest bucket: the graph engines refuse to start (and
// say to use this engine); the dynamic-parallelism engine runs batches of any
// size up to max_batch, with continuous submission and a small mailbox.
TEST_F(DynamicParallelismTest, BatchesAboveEveryBucketRunOnlyOnThisEngine) {
  RuntimeOptions options;
  options.max_batch = 100;
  options.mailbox_capacity = 128;
  options.queue_capacity = 256;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, 4, {8, 32}));
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional}) {
    const absl::Status status = runtime->Start(engine);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("the largest bucket (32) is smaller than a whole step (100: "
                                    "RuntimeOptions.max_batch)"),
              absl::string_view::npos)
        << status;
    EXPECT_NE(status.message().find("Engine::kDynamicParallelism"), absl::string_view::npos)
        << status;
    EXPECT_FALSE(runtime->running());
  }
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  ledger_.SubmitInChunks(*runtime, rng_, kKind, 800, 150, 30);
  ledger_.PollUntil(*runtime, 800);
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
  EXPECT_EQ(report.still_queued, 0u);
  const RuntimeStats stats = runtime->stats();
  EXPECT_EQ(stats.admitted, 800u);
  EXPECT_EQ(stats.completed, 800u);
  EXPECT_EQ(stats.device_launches, stats.steps * 5);
}

// The same items through every engine, one after another on one runtime
// (drain and restart between them): identical completions, identical step
// counts, and each equal to the host reference.
TEST_F(DynamicParallelismTest, SameWorkGivesIdenticalResultsOnEveryEngine) {
  RuntimeOptions options;
  options.max_batch = 64;
  options.queue_capacity = 1024;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, 5, {4, 16, 64}));
  const std::vector<WorkItem> items = MakeItems(0, 500, 40);
  std::map<std::uint32_t, std::pair<std::uint32_t, std::uint32_t>> reference;  // (steps, value)
  std::uint64_t reference_steps = 0;
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional, Engine::kDynamicParallelism}) {
    SCOPED_TRACE(static_cast<int>(engine));
    ledger_.ClearCompletions();
    BATON_ASSERT_OK(runtime->Start(engine));
    // Submit to an engine that went idle, so the first decision sees the
    // whole queue and every engine forms the same batches.
    const testing::Deadline deadline(std::chrono::seconds(10));
    for (RuntimeStats s = runtime->stats(); s.engine_exits < s.engine_launches;
         s = runtime->stats()) {
      ASSERT_FALSE(deadline.passed()) << "the empty engine did not go idle";
    }
    const std::uint64_t steps_before = runtime->stats().steps;
    BATON_ASSERT_OK(runtime->Submit(items));
    ledger_.PollUntil(*runtime, items.size());
    BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
    EXPECT_EQ(report.still_queued, 0u);
    const std::uint64_t steps = runtime->stats().steps - steps_before;
    if (engine == Engine::kTailLaunch) {
      reference = ledger_.Results();
      reference_steps = steps;
    } else {
      EXPECT_EQ(ledger_.Results(), reference);
      // Same queue order and the same decide(): the same batches, step by step.
      EXPECT_EQ(steps, reference_steps);
    }
  }
}

TEST_F(DynamicParallelismTest, StopDrainsInFlightWorkAndStartResumesTheQueue) {
  RuntimeOptions options;
  options.max_batch = 16;
  options.queue_capacity = 1024;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, 3, {}));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 400, 200)));
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  std::vector<Completion> out(8);
  BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
  ledger_.AccountAll(absl::MakeConstSpan(out.data(), n));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
  ledger_.AccountAll(report.completions);
  EXPECT_FALSE(runtime->running());
  EXPECT_TRUE(report.in_flight.empty());
  EXPECT_EQ(ledger_.completed() + report.still_queued, 400u);
  EXPECT_GT(report.still_queued, 0u) << "400 long items cannot all finish before Stop";
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  ledger_.PollUntil(*runtime, 400);
  BATON_ASSERT_OK(runtime->Stop().status());
}

TEST_F(DynamicParallelismTest, AbortHandsBackInFlightItemsAndLosesNothing) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, 2, {}));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < 20; ++i) {
    items.push_back(WorkItem::make(kKind, i, 1u << 30));  // never finish on their own
  }
  BATON_ASSERT_OK(runtime->Submit(items));
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_TRUE(report.completions.empty());
  EXPECT_EQ(report.in_flight.size(), 8u);
  EXPECT_EQ(report.in_flight.size() + report.still_queued, 20u);
  for (const WorkItem& item : report.in_flight) EXPECT_LT(item.id, 20u);
  EXPECT_GT(runtime->stats().steps, 0u);
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport second, runtime->Abort());
  EXPECT_EQ(second.in_flight.size() + second.still_queued, 12u);
}

// A step of 3000 kernels: the scheduler's tail launches pass the device
// runtime's pending-launch limit (default 2048; measured on an H200: 301
// tail-launched kernels per grid are all accepted, so the 255 limit of
// device graph tail launches does not apply to kernels). The refused launch
// ends the loop with a Status naming the limit, the context stays healthy,
// and Abort hands back every item.
TEST_F(DynamicParallelismTest, PendingLaunchLimitHitOnPurposeIsAStatusAndLosesNoWork) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, 3000, {}));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < 12; ++i) items.push_back(WorkItem::make(kKind, i, 3));
  BATON_ASSERT_OK(runtime->Submit(items));
  BATON_ASSERT_OK(runtime->Start(Engine::kDynamicParallelism));
  const testing::Polled polled =
      testing::PollCompletions(*runtime, items.size(), {std::chrono::seconds(10), 16});
  const absl::Status& failure = polled.failure;
  const RuntimeStats stats = runtime->stats();
  std::cout << "[ limit    ] " << failure << " (kernel launches accepted: " << stats.device_launches
            << ", steps: " << stats.steps << ")\n";
  EXPECT_FALSE(failure.ok()) << "3000 tail launches per step were all accepted";
  EXPECT_NE(failure.message().find("device kernel launch (dynamic parallelism) failed with"),
            absl::string_view::npos)
      << failure;
  EXPECT_NE(failure.message().find("launch fewer kernels per step"), absl::string_view::npos)
      << failure;
  EXPECT_LT(stats.device_launches, 3001u);
  EXPECT_EQ(cudaStreamSynchronize(runtime->stream()), cudaSuccess)
      << "a refused device launch must not poison the context";

  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_EQ(polled.completions + report.completions.size() + report.in_flight.size() +
                report.still_queued,
            items.size())
      << "work was lost";
  EXPECT_EQ(report.in_flight.size(), 8u);
  EXPECT_EQ(report.still_queued, 4u);
  EXPECT_EQ(runtime->Start(Engine::kDynamicParallelism).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DynamicParallelismTest, StartWithoutADeviceStepIsRefused) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(options));
  SyntheticStepOptions synthetic;
  synthetic.max_batch = 8;
  synthetic.buckets = {8};
  BATON_ASSERT_OK_AND_ASSIGN(StepProgram program, SyntheticStepProgram(synthetic));
  program.name = "graphs only";
  program.device_step = DeviceStepProgram{};
  BATON_ASSERT_OK(runtime->RegisterStepProgram(std::move(program)));
  const absl::Status status = runtime->Start(Engine::kDynamicParallelism);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("Start(Engine::kDynamicParallelism): step program 'graphs "
                                  "only' has no device step: set StepProgram::device_step"),
            absl::string_view::npos)
      << status;
  EXPECT_FALSE(runtime->running());
  // The same program still runs on a graph engine.
  BATON_ASSERT_OK(runtime->Start(Engine::kTailLaunch));
  BATON_ASSERT_OK(runtime->Stop().status());
}

TEST_F(DynamicParallelismTest, SyntheticOptionsOutOfRangeAreRefused) {
  SyntheticStepOptions synthetic;
  synthetic.kernels = 0;
  absl::StatusOr<StepProgram> program = SyntheticStepProgram(synthetic);
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
  synthetic.kernels = kMaxSyntheticKernels + 1;
  program = SyntheticStepProgram(synthetic);
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(program.status().message().find("is outside [1, 4096]"), absl::string_view::npos)
      << program.status();
  // Built for a smaller batch than the runtime's: refused at registration.
  RuntimeOptions options;
  options.max_batch = 16;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(options));
  synthetic.kernels = 2;
  synthetic.max_batch = 8;
  synthetic.buckets = {16};
  BATON_ASSERT_OK_AND_ASSIGN(StepProgram small, SyntheticStepProgram(synthetic));
  EXPECT_EQ(runtime->RegisterStepProgram(std::move(small)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton
