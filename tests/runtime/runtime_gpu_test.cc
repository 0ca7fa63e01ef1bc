// The runtime end to end on the GPU, for every engine: every submitted item
// completes exactly once with the right step count and result; each step runs
// each active item exactly once (per-item run counters); Stop drains and
// Start resumes; Abort hands back what was in flight; misuse gets a Status.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/runtime.h"
#include "engines/scheduler_nodes.h"
#include "runtime_test_kernels.h"
#include "support/completion_ledger.h"
#include "support/device_buffers.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"

namespace baton {
namespace {

constexpr std::uint32_t kMaxItems = 4096;
constexpr std::uint32_t kKind = 1;

class RuntimeTest : public testing::SeededGpuTest<std::mt19937>,
                    public ::testing::WithParamInterface<Engine> {
 protected:
  void SetUp() override {
    SeededGpuTest::SetUp();
    if (IsSkipped()) return;
    BATON_ASSERT_OK_AND_ASSIGN(runs_, testing::FilledBuffer<std::uint32_t>(kMaxItems, 0));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  // The countdown program; with `two_kernels`, as two kernels launched with
  // programmatic dependent launch that pass a value through scratch memory.
  absl::StatusOr<std::unique_ptr<Runtime>> MakeRuntime(RuntimeOptions options,
                                                       std::vector<std::uint32_t> buckets = {},
                                                       bool two_kernels = false) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::Create(options));
    StepProgram program;
    program.name = "countdown";
    program.buckets = buckets.empty() ? PowerOfTwoBuckets(options.max_batch) : buckets;
    BATON_ASSIGN_OR_RETURN(scratch_, DeviceBuffer<std::uint32_t>::Create(options.max_batch));
    BATON_RETURN_IF_ERROR(scratch_.Fill(0xFF));
    std::uint32_t* runs = runs_.data();
    std::uint32_t* scratch = scratch_.data();
    program.enqueue = [runs, scratch, two_kernels](const StepContext& context,
                                                   cudaStream_t stream) -> absl::Status {
      BATON_CUDA_RETURN_IF_ERROR(
          two_kernels
              ? test::EnqueueTwoKernelCountdownStep(context.args, context.bucket_size, runs,
                                                    scratch, stream)
              : test::EnqueueCountdownStep(context.args, context.bucket_size, runs, stream));
      return absl::OkStatus();
    };
    BATON_RETURN_IF_ERROR(runtime->RegisterStepProgram(std::move(program)));
    return runtime;
  }

  std::vector<WorkItem> MakeItems(std::uint32_t first_id, std::uint32_t count,
                                  std::uint32_t max_steps) {
    return ledger_.MakeItems(rng_, kKind, first_id, count, 1, max_steps);
  }

  static testing::CompletionLedger CountdownLedger() {
    return testing::CompletionLedger(test::CountdownValue);
  }

  // Every completed item ran exactly as many steps as it asked for.
  void ExpectRunCounts() {
    std::vector<std::uint32_t> runs(kMaxItems);
    BATON_ASSERT_OK(runs_.CopyTo(absl::MakeSpan(runs)));
    for (const auto& [id, c] : ledger_.completions()) {
      EXPECT_EQ(runs[id], ledger_.needed().at(id))
          << "item " << id << " ran a wrong number of steps";
    }
  }

  DeviceBuffer<std::uint32_t> runs_;
  DeviceBuffer<std::uint32_t> scratch_;
  testing::CompletionLedger ledger_ = CountdownLedger();
};

TEST_P(RuntimeTest, EveryItemCompletesExactlyOnceWithContinuousSubmission) {
  RuntimeOptions options;
  options.max_batch = 64;
  options.mailbox_capacity = 64;  // small: the engine parks on a full mailbox and resumes
  options.queue_capacity = 256;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.SubmitInChunks(*runtime, rng_, kKind, 1000, 120, 40);
  ledger_.PollUntil(*runtime, 1000);
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
  EXPECT_TRUE(report.completions.empty());
  EXPECT_EQ(report.still_queued, 0u);
  ExpectRunCounts();
  const RuntimeStats stats = runtime->stats();
  EXPECT_EQ(stats.submitted, 1000u);
  EXPECT_EQ(stats.admitted, 1000u);
  EXPECT_EQ(stats.completed, 1000u);
  EXPECT_GT(stats.steps, 40u);
  EXPECT_GE(stats.engine_exits, 1u);
  if (GetParam() == Engine::kTailLaunch) EXPECT_GT(stats.device_launches, 0u);
}

// Both graph engines with 1, 2, 3 and 8 steps per bucket graph / loop body
// (the default 4 runs in every other test): items of random lengths over
// several buckets, so inner scheduler nodes keep carrying decisions to other
// buckets and emptying steps, and every item still runs exactly its steps, once.
TEST_P(RuntimeTest, EveryStepsPerLaunchRunsEachItemExactlyItsSteps) {
  for (std::uint32_t steps_per_launch : {1u, 2u, 3u, 8u}) {
    SCOPED_TRACE(steps_per_launch);
    BATON_ASSERT_OK(runs_.Fill(0));
    ledger_ = CountdownLedger();
    RuntimeOptions options;
    options.max_batch = 64;
    options.tail_steps_per_launch = steps_per_launch;
    options.conditional_steps_per_iteration = steps_per_launch;
    BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
    BATON_ASSERT_OK(runtime->Start(GetParam()));
    std::vector<Completion> out(64);
    for (std::uint32_t first = 0; first < 600; first += 50) {
      BATON_ASSERT_OK(runtime->Submit(MakeItems(first, 50, 30)));
      BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
      ledger_.AccountAll(absl::MakeConstSpan(out.data(), n));
    }
    ledger_.PollUntil(*runtime, 600);
    BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
    EXPECT_TRUE(report.completions.empty());
    ExpectRunCounts();
    const RuntimeStats stats = runtime->stats();
    EXPECT_EQ(stats.completed, 600u);
    // One launch per bucket graph: fewer launches than steps once n > 1.
    if (steps_per_launch > 1) EXPECT_LT(stats.device_launches, stats.steps);
  }
}

// Step kernels launched with programmatic dependent launch may start before
// the node they follow has finished; with wait_for_previous_nodes() they still
// see its results, so every item finishes at exactly its step.
TEST_P(RuntimeTest, ProgrammaticLaunchedStepKernelsSeeEachOthersResults) {
  RuntimeOptions options;
  options.max_batch = 64;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, {}, /*two_kernels=*/true));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 500, 25)));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.PollUntil(*runtime, 500);
  BATON_ASSERT_OK(runtime->Stop().status());
  ExpectRunCounts();
}

// A single bucket: the conditional engine then runs without a SWITCH level
// ([scheduler] -> WHILE { step; scheduler }); results must not change.
TEST_P(RuntimeTest, SingleBucketProgramRunsEveryItemExactly) {
  RuntimeOptions options;
  options.max_batch = 16;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, {16}));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 300, 30)));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.PollUntil(*runtime, 300);
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
  EXPECT_EQ(report.still_queued, 0u);
  ExpectRunCounts();
}

// More buckets than a warp has lanes: the scheduler chooses by binary search
// instead of one ballot; every batch size 1..40 has its own bucket.
TEST_P(RuntimeTest, ManyBucketsChooseCorrectly) {
  RuntimeOptions options;
  options.max_batch = 40;
  std::vector<std::uint32_t> buckets;
  for (std::uint32_t b = 1; b <= 40; ++b) buckets.push_back(b);
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, buckets));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 300, 30)));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.PollUntil(*runtime, 300);
  BATON_ASSERT_OK(runtime->Stop().status());
  ExpectRunCounts();
}

TEST_P(RuntimeTest, StopDrainsInFlightWorkAndStartResumesTheQueue) {
  RuntimeOptions options;
  options.max_batch = 16;
  options.queue_capacity = 1024;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 400, 200)));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  std::vector<Completion> out(8);
  BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
  ledger_.AccountAll(absl::MakeConstSpan(out.data(), n));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Stop());
  ledger_.AccountAll(report.completions);
  EXPECT_FALSE(runtime->running());
  // Seeded = completed + still queued, exactly: nothing in flight after a drain.
  EXPECT_EQ(ledger_.completed() + report.still_queued, 400u);
  EXPECT_GT(report.still_queued, 0u) << "400 long items cannot all finish before Stop";
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.PollUntil(*runtime, 400);
  BATON_ASSERT_OK(runtime->Stop().status());
  ExpectRunCounts();
}

TEST_P(RuntimeTest, AbortHandsBackInFlightItemsAndLosesNothing) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < 20; ++i) {
    items.push_back(WorkItem::make(kKind, i, 1u << 30));  // never finish on their own
    ledger_.Expect(i, 1u << 30);
  }
  BATON_ASSERT_OK(runtime->Submit(items));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_TRUE(report.completions.empty());
  EXPECT_EQ(report.in_flight.size(), 8u);
  EXPECT_EQ(report.in_flight.size() + report.still_queued, 20u);
  for (const WorkItem& item : report.in_flight) EXPECT_LT(item.id, 20u);
  EXPECT_FALSE(runtime->running());
  // The runtime can run again after an abort; the queued items continue.
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport second, runtime->Abort());
  EXPECT_EQ(second.in_flight.size() + second.still_queued, 12u);
}

// Destroying a running runtime ends its loop before freeing what the loop
// uses: no hang, no fault, and the device stays healthy (GpuTest checks).
TEST_P(RuntimeTest, DestroyingARunningRuntimeEndsTheLoopCleanly) {
  RuntimeOptions options;
  options.max_batch = 16;
  {
    BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
    BATON_ASSERT_OK(runtime->Submit(MakeItems(0, 100, 1000000)));  // never finish on their own
    BATON_ASSERT_OK(runtime->Start(GetParam()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_P(RuntimeTest, MisuseGetsAClearStatus) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto bare, Runtime::Create(options));
  absl::Status status = bare->Start(GetParam());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("no step program registered"), absl::string_view::npos) << status;
  EXPECT_EQ(bare->Stop().status().code(), absl::StatusCode::kFailedPrecondition);

  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  StepProgram again;
  again.buckets = {8};
  again.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  EXPECT_EQ(runtime->RegisterStepProgram(again).code(), absl::StatusCode::kFailedPrecondition);
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  status = runtime->Start(GetParam());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("already running"), absl::string_view::npos) << status;
  const WorkItem sentinel = WorkItem::terminate();
  EXPECT_EQ(runtime->Submit(absl::MakeConstSpan(&sentinel, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  BATON_ASSERT_OK(runtime->Stop().status());
  EXPECT_EQ(runtime->Stop().status().code(), absl::StatusCode::kFailedPrecondition);
  const WorkItem late = WorkItem::make(1, 99, 1);
  status = runtime->Submit(absl::MakeConstSpan(&late, 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("Submit after Stop"), absl::string_view::npos) << status;
}

// A step program whose graph holds something a device-launched graph may not
// (a host node) is refused when the engine prepares, naming the node.
TEST_P(RuntimeTest, StepProgramThatIsNotGraphSafeIsRefused) {
  RuntimeOptions options;
  options.max_batch = 4;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(options));
  StepProgram program;
  program.name = "with host callback";
  program.buckets = {4};
  program.enqueue = [](const StepContext&, cudaStream_t stream) -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(
        stream, [](void*) {}, nullptr));
    return absl::OkStatus();
  };
  BATON_ASSERT_OK(runtime->RegisterStepProgram(std::move(program)));
  const absl::Status status = runtime->Start(GetParam());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("host node"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("with host callback"), absl::string_view::npos) << status;
  EXPECT_FALSE(runtime->running());
}

using RuntimeFailureTest = testing::GpuTest;

// The scheduler only ever runs inside a graph: asked to enqueue it on a stream
// that is not capturing, the runtime refuses and enqueues nothing.
TEST_F(RuntimeFailureTest, SchedulerOutsideAGraphIsRefused) {
  BATON_ASSERT_OK_AND_ASSIGN(Stream stream, CreateStream());
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional}) {
    const absl::Status status = detail::CaptureSchedulerNode(engine, nullptr, stream.get());
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("must be captured into a graph"), absl::string_view::npos)
        << status;
  }
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
}

// A step that uses up its graph's one pending self-launch makes the
// scheduler's tail launch of the same bucket graph fail: the failure surfaces
// as a Status naming it, the loop stops for good, and Abort hands back every
// item, so none is lost. Tail-launch engine only: a device launch inside a
// conditional body hangs (docs/cuda-facts.md, C1).
TEST_F(RuntimeFailureTest, SelfLaunchLimitHitOnPurposeIsAStatusAndLosesNoWork) {
  BATON_ASSERT_OK_AND_ASSIGN(auto flag, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_ASSERT_OK_AND_ASSIGN(auto runs, DeviceBuffer<std::uint32_t>::Create(16));
  BATON_ASSERT_OK(flag.Fill(0));
  BATON_ASSERT_OK(runs.Fill(0));
  RuntimeOptions options;
  options.max_batch = 8;
  // One step per graph: the first graph's tail launch is refused while all 8
  // admitted items are still in flight (with 4 steps per graph these 3-step
  // items would finish inside the first graph).
  options.tail_steps_per_launch = 1;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(options));
  StepProgram program;
  program.name = "self-launching step";
  program.buckets = {8};  // one bucket: the scheduler always relaunches this graph
  std::uint32_t* flag_ptr = flag.data();
  std::uint32_t* runs_ptr = runs.data();
  program.enqueue = [=](const StepContext& context, cudaStream_t s) -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(test::EnqueueSelfLaunchOnce(flag_ptr, s));
    // Items finish after 3 steps, so the loop ends even if no launch fails.
    BATON_CUDA_RETURN_IF_ERROR(
        test::EnqueueCountdownStep(context.args, context.bucket_size, runs_ptr, s));
    return absl::OkStatus();
  };
  BATON_ASSERT_OK(runtime->RegisterStepProgram(std::move(program)));
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < 12; ++i) items.push_back(WorkItem::make(1, i, 3));
  BATON_ASSERT_OK(runtime->Submit(items));
  BATON_ASSERT_OK(runtime->Start(Engine::kTailLaunch));

  const testing::Polled polled =
      testing::PollCompletions(*runtime, items.size(), {std::chrono::seconds(10), 16});
  const absl::Status& failure = polled.failure;
  std::uint32_t flag_value = 0;
  ASSERT_EQ(cudaMemcpy(&flag_value, flag.data(), sizeof(flag_value), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(flag_value, 1u) << "the step's own self-launch must have been accepted";
  EXPECT_EQ(failure.code(), absl::StatusCode::kInvalidArgument) << failure;
  EXPECT_NE(failure.message().find("device tail launch"), absl::string_view::npos) << failure;
  EXPECT_NE(failure.message().find("cudaErrorInvalidValue"), absl::string_view::npos) << failure;
  EXPECT_EQ(cudaStreamSynchronize(runtime->stream()), cudaSuccess)
      << "a refused device launch must not poison the context";

  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_EQ(polled.completions + report.completions.size() + report.in_flight.size() +
                report.still_queued,
            items.size())
      << "work was lost";
  EXPECT_EQ(report.in_flight.size(), 8u);
  EXPECT_EQ(runtime->Start(Engine::kTailLaunch).code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Engines, RuntimeTest,
                         ::testing::Values(Engine::kTailLaunch, Engine::kConditional),
                         [](const ::testing::TestParamInfo<Engine>& info) {
                           return info.param == Engine::kTailLaunch ? std::string("TailLaunch")
                                                                    : std::string("Conditional");
                         });

}  // namespace
}  // namespace baton
