// Reliability of the runtime on the GPU, on every engine (support/engine_list.h):
// the device trace tells the truth about the loop (every step begun ends,
// admits and retires add up to the items), the watchdog notices a stalled
// step and Abort then hands back the in-flight work, the watchdog never fires
// on a healthy loop, and across Start/Stop/Abort cycles every seeded item is
// completed or handed back exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <cuda/atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/runtime.h"
#include "baton/trace.h"
#include "reliability_test_kernels.h"
#include "runtime_test_kernels.h"
#include "support/completion_ledger.h"
#include "support/device_buffers.h"
#include "support/engine_list.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kMaxItems = 8192;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

class ReliabilityTest : public testing::SeededGpuTest<std::mt19937>,
                        public ::testing::WithParamInterface<Engine> {
 protected:
  void SetUp() override {
    SeededGpuTest::SetUp();
    if (IsSkipped()) return;
    BATON_ASSERT_OK_AND_ASSIGN(runs_, testing::FilledBuffer<std::uint32_t>(kMaxItems, 0));
    BATON_ASSERT_OK_AND_ASSIGN(gate_, MappedHostBuffer<std::uint32_t>::Create(1));
    *gate_.host() = test::kGateIdle;
  }

  // The countdown program (runtime_test_kernels.h), with a kernel that
  // stalls once armed when `stall_ns` > 0.
  absl::StatusOr<std::unique_ptr<Runtime>> MakeRuntime(const RuntimeOptions& options,
                                                       unsigned long long stall_ns = 0) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::Create(options));
    StepProgram program;
    program.name = "countdown";
    program.buckets = PowerOfTwoBuckets(options.max_batch);
    std::uint32_t* runs = runs_.data();
    std::uint32_t* gate = gate_.device();
    program.enqueue = [runs, gate, stall_ns](const StepContext& context,
                                             cudaStream_t stream) -> absl::Status {
      if (stall_ns > 0) BATON_CUDA_RETURN_IF_ERROR(test::EnqueueStallOnce(gate, stall_ns, stream));
      BATON_CUDA_RETURN_IF_ERROR(
          test::EnqueueCountdownStep(context.args, context.bucket_size, runs, stream));
      return absl::OkStatus();
    };
    BATON_RETURN_IF_ERROR(runtime->RegisterStepProgram(std::move(program)));
    return runtime;
  }

  // `count` items with fresh ids.
  std::vector<WorkItem> MakeItems(std::uint32_t count, std::uint32_t min_steps,
                                  std::uint32_t max_steps) {
    const std::uint32_t first = next_id_;
    next_id_ += count;
    return ledger_.MakeItems(rng_, 1, first, count, min_steps, max_steps);
  }

  DeviceBuffer<std::uint32_t> runs_;
  MappedHostBuffer<std::uint32_t> gate_;
  std::uint32_t next_id_ = 0;
  testing::CompletionLedger ledger_{test::CountdownValue};
};

// The trace of a finished run accounts for every step and item: sequences
// consecutive, time never backwards, each step begins once (in order) and
// ends with its retirement, admits and retires each add up to the items, the
// bucket of each step fits its batch, and the JSON has one slice per step.
TEST_P(ReliabilityTest, TraceAccountsForEveryStepAndItem) {
  RuntimeOptions options;
  options.max_batch = 32;
  options.trace_capacity = 1u << 16;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(200, 1, 40)));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  ledger_.PollUntil(*runtime, 200, std::chrono::seconds(60));
  BATON_ASSERT_OK(runtime->Stop().status());
  BATON_ASSERT_OK_AND_ASSIGN(const std::vector<TraceEvent> events, runtime->Trace());
  const RuntimeStats stats = runtime->stats();
  ASSERT_FALSE(events.empty());
  ASSERT_LT(events.size(), options.trace_capacity) << "the ring wrapped; the test needs all";

  std::uint64_t admitted = 0;
  std::uint64_t retired = 0;
  std::uint64_t begun = 0;
  std::uint64_t ended = 0;
  std::uint64_t exits = 0;
  std::uint32_t batch = 0;
  const std::vector<std::uint32_t> buckets = PowerOfTwoBuckets(options.max_batch);
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    EXPECT_EQ(e.sequence, static_cast<std::uint32_t>(i)) << "event " << i;
    if (i > 0) EXPECT_GE(e.time_ns, events[i - 1].time_ns) << "time went backwards at " << i;
    switch (e.type) {
      case TraceEventType::kAdmit:
        admitted += e.a;
        EXPECT_EQ(e.b, batch + e.a);
        batch = e.b;
        break;
      case TraceEventType::kStepBegin:
        EXPECT_EQ(e.step, begun) << "steps begin in order";
        EXPECT_EQ(e.a, batch);
        ASSERT_LT(e.b, buckets.size());
        EXPECT_GE(buckets[e.b], e.a) << "bucket " << e.b << " too small for batch " << e.a;
        if (e.b > 0) EXPECT_LT(buckets[e.b - 1], e.a) << "not the smallest fitting bucket";
        ++begun;
        break;
      case TraceEventType::kStepEnd:
        EXPECT_EQ(e.step + 1, begun) << "a step ends after it began";
        retired += e.a;
        EXPECT_EQ(e.b, batch - e.a);
        batch = e.b;
        ++ended;
        break;
      case TraceEventType::kExit:
        ++exits;
        EXPECT_NE(e.a, static_cast<std::uint32_t>(EngineExit::kError));
        break;
      default:
        ADD_FAILURE() << "unexpected event " << FormatTraceEvent(e, 0);
    }
  }
  EXPECT_EQ(admitted, 200u);
  EXPECT_EQ(retired, 200u);
  EXPECT_EQ(begun, stats.steps);
  EXPECT_EQ(ended, stats.steps);
  EXPECT_EQ(exits, stats.engine_exits);
  EXPECT_EQ(events.back().type, TraceEventType::kExit);
  EXPECT_TRUE(events.back().a == static_cast<std::uint32_t>(EngineExit::kIdle) ||
              events.back().a == static_cast<std::uint32_t>(EngineExit::kDrained))
      << FormatTraceEvent(events.back(), 0);

  const std::string json = TraceJson(events);
  size_t slices = 0;
  for (size_t at = 0; (at = json.find(R"("ph":"X")", at)) != std::string::npos; ++at) ++slices;
  EXPECT_EQ(slices, stats.steps);
  EXPECT_TRUE(Contains(json, R"("traceEvents":[)"));
  BATON_ASSERT_OK_AND_ASSIGN(const std::vector<TraceEvent> last, runtime->Trace(5));
  ASSERT_EQ(last.size(), 5u);
  EXPECT_EQ(last.back().sequence, events.back().sequence);
}

// Trace() copies while the loop runs: the events come back in order, the
// newest ones present, none torn (sequence numbers consecutive).
TEST_P(ReliabilityTest, TraceWhileTheLoopRunsIsOrderedAndAdvances) {
  RuntimeOptions options;
  options.max_batch = 8;
  options.trace_capacity = 256;  // small: the ring wraps many times while copied
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(8, 1u << 30, 1u << 30)));  // never finish
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  std::uint32_t previous_last = 0;
  for (int round = 0; round < 20; ++round) {
    // Wait for the first events, then for new ones (under compute-sanitizer
    // the engine starts and steps far more slowly).
    std::vector<TraceEvent> events;
    const testing::Deadline deadline(std::chrono::seconds(5));
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      BATON_ASSERT_OK_AND_ASSIGN(events, runtime->Trace());
    } while ((events.empty() || (round > 0 && events.back().sequence == previous_last)) &&
             !deadline.passed());
    ASSERT_FALSE(events.empty());
    EXPECT_LE(events.size(), 256u);
    for (size_t i = 1; i < events.size(); ++i) {
      ASSERT_EQ(events[i].sequence, events[i - 1].sequence + 1) << "round " << round;
      ASSERT_GE(events[i].time_ns, events[i - 1].time_ns) << "round " << round;
    }
    if (round > 0) EXPECT_GT(events.back().sequence, previous_last) << "the trace did not advance";
    previous_last = events.back().sequence;
  }
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_EQ(report.in_flight.size(), 8u);
}

TEST_P(ReliabilityTest, TraceWhenOffIsAClearStatus) {
  RuntimeOptions options;
  options.max_batch = 8;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  const absl::Status status = runtime->Trace().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(Contains(status.message(), "set RuntimeOptions.trace_capacity")) << status;
}

// A step kernel stalls for 3 s (bounded, on the global timer), twice, with a
// 500 ms timeout. The promise (RuntimeOptions::watchdog_timeout): Poll reads
// the step counter at most every tenth of the timeout (1 to 100 ms: the read
// period) and returns DeadlineExceeded once the counter has not moved for the
// timeout, so never sooner than the timeout after the last step began, and at
// most the read period plus the caller's polling later.
//
// Each stall is timed from a mark the test sets, with no Poll between the
// mark and the stall's start but the mark's own, and the bounds are
//   timeout < alarm - mark <= timeout + read period + slack,
// slack = the time from the mark until the stall is seen to begin (the
// stalled step began before that) + twice the caller's polling: the longest
// span from one Poll's start to the next one's end, since the read and the
// alarm each come in the first Poll past their time (microseconds all).
//  1. The mark is the arming, after two read periods without Poll: the first
//     Poll after the stall began reads at once, so the alarm comes just after
//     the timeout and a premature one fails the lower bound.
//  2. The mark is a Poll that reads just before the arming: the next read
//     comes a read period later, so the alarm comes near the upper bound and
//     a late read fails it.
// Between the two, the step ends and Poll is OK again (a slow step is not a
// failure); after the second, Poll names the engine and step, quotes the
// trace, says to Abort and leaves the runtime running; Abort hands back the
// in-flight items once the step ends, and no item is lost.
TEST_P(ReliabilityTest, WatchdogReportsAStalledStepAndAbortHandsBackTheWork) {
  const absl::Duration timeout = absl::Milliseconds(500);
  const absl::Duration read_period =
      std::clamp(timeout / 10, absl::Milliseconds(1), absl::Milliseconds(100));
  RuntimeOptions options;
  options.max_batch = 8;
  options.trace_capacity = 1024;
  options.watchdog_timeout = timeout;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options, /*stall_ns=*/3'000'000'000ull));
  BATON_ASSERT_OK(runtime->Submit(MakeItems(20, 1u << 30, 1u << 30)));  // never finish
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  std::vector<Completion> out(16);
  for (int i = 0; i < 10; ++i) BATON_ASSERT_OK(runtime->Poll(absl::MakeSpan(out)).status());
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system> gate(*gate_.host());
  const std::string engine = testing::EngineTestName({GetParam(), 0});

  // Arms the stall, waits for it to begin without polling, then polls without
  // pause until Poll reports it; checks the alarm's time since `mark`.
  // Times are taken with the runtime's own clock (absl::Now), so the bounds
  // need no allowance for two clocks.
  auto time_alarm = [&](const char* phase, absl::Time mark) {
    gate.store(test::kGateArmed, cuda::std::memory_order_release);
    while (gate.load(cuda::std::memory_order_acquire) == test::kGateArmed) {
      if (absl::Now() - mark > absl::Seconds(10)) {
        return absl::InternalError(absl::StrCat(phase, ": the stall never began"));
      }
    }
    const absl::Time began = absl::Now();
    absl::Status status;
    absl::Time previous_start = began, alarm = began;
    absl::Duration polling;
    while (status.ok() && alarm - began < absl::Seconds(10)) {
      const absl::Time start = absl::Now();
      const absl::StatusOr<size_t> n = runtime->Poll(absl::MakeSpan(out));
      alarm = absl::Now();
      status = n.status();
      if (n.ok()) EXPECT_EQ(*n, 0u);
      polling = std::max(polling, alarm - previous_start);
      previous_start = start;
    }
    const absl::Duration detected = alarm - mark;
    const absl::Duration slack = (began - mark) + 2 * polling;
    const absl::Duration upper = timeout + read_period + slack;
    std::printf(
        "[ watchdog ] %s engine, %s: alarm %s after the mark (bounds: above %s, at most "
        "%s = + read period %s + slack %s)\n",
        engine.c_str(), phase, absl::FormatDuration(detected).c_str(),
        absl::FormatDuration(timeout).c_str(), absl::FormatDuration(upper).c_str(),
        absl::FormatDuration(read_period).c_str(), absl::FormatDuration(slack).c_str());
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << phase << ": " << status;
    EXPECT_GT(detected, timeout) << phase << ": the watchdog fired before the timeout";
    EXPECT_LE(detected, upper) << phase << ": the watchdog fired later than its read period "
                               << "and the caller's polling allow";
    EXPECT_TRUE(runtime->running()) << phase << ": a stall is reported, not treated as a failure";
    EXPECT_EQ(gate.load(), test::kGateStarted) << phase << ": the stall should still be going on";
    return status;
  };
  const auto sleep = [](absl::Duration d) {
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(d));
  };

  // 1. No Poll for two read periods, then the mark and the arming.
  sleep(2 * read_period);
  const absl::Status first = time_alarm("read just after the stall began", absl::Now());
  ASSERT_EQ(first.code(), absl::StatusCode::kDeadlineExceeded) << first;
  // The step ends: the next read sees progress and Poll is OK again.
  for (const testing::Deadline deadline(std::chrono::seconds(10));
       gate.load(cuda::std::memory_order_acquire) != test::kGateFinished;) {
    ASSERT_FALSE(deadline.passed()) << "the first stall never ended";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  absl::Status recovered = absl::UnknownError("not polled");
  for (const testing::Deadline deadline(std::chrono::seconds(10));
       !recovered.ok() && !deadline.passed();) {
    recovered = runtime->Poll(absl::MakeSpan(out)).status();
  }
  ASSERT_TRUE(recovered.ok()) << "Poll did not recover after the step ended: " << recovered;

  // 2. No Poll for two read periods, then the mark: a Poll that reads.
  sleep(2 * read_period);
  const absl::Time mark = absl::Now();
  BATON_ASSERT_OK(runtime->Poll(absl::MakeSpan(out)).status());
  const absl::Status status = time_alarm("read just before the stall began", mark);
  std::printf("[ watchdog ] %s\n", std::string(status.message()).c_str());
  EXPECT_TRUE(Contains(status.message(), "watchdog")) << status;
  EXPECT_TRUE(Contains(status.message(), GetParam() == Engine::kTailLaunch ? "tail-launch engine"
                                                                           : "conditional "
                                                                             "engine"))
      << status;
  EXPECT_TRUE(Contains(status.message(), "has not finished")) << status;
  EXPECT_TRUE(Contains(status.message(), "Call Abort()")) << status;
  EXPECT_TRUE(Contains(status.message(), "Last trace events:")) << status;
  EXPECT_TRUE(Contains(status.message(), "step_begin")) << status;

  BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, runtime->Abort());
  EXPECT_EQ(gate.load(), test::kGateFinished);
  EXPECT_EQ(report.in_flight.size(), 8u);
  EXPECT_EQ(report.in_flight.size() + report.still_queued, 20u) << "work was lost";
  std::set<std::uint32_t> ids;
  for (const WorkItem& item : report.in_flight) ids.insert(item.id);
  EXPECT_EQ(ids.size(), 8u) << "an item came back twice";
}

// A healthy loop with a short timeout never trips the watchdog: a loop that
// runs for many timeouts, polled often and polled after a long pause, idle
// gaps longer than the timeout, and waves of work. Timed by the clock rather
// than by step counts, so it holds under compute-sanitizer's slower steps.
TEST_P(ReliabilityTest, WatchdogNeverFiresOnAHealthyLoop) {
  {
    // Warm-up: module loading (slow under compute-sanitizer) happens here,
    // not inside a watched window.
    RuntimeOptions warm;
    warm.max_batch = 64;
    BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(warm));
    BATON_ASSERT_OK(runtime->Submit(MakeItems(8, 1, 4)));
    BATON_ASSERT_OK(runtime->Start(GetParam()));
    ledger_.PollUntil(*runtime, 8, std::chrono::seconds(60));
    BATON_ASSERT_OK(runtime->Stop().status());
  }
  RuntimeOptions options;
  options.max_batch = 64;
  options.watchdog_timeout = absl::Milliseconds(200);
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  std::vector<Completion> out(128);
  // 1.5 s of items that never finish: Poll often, then not at all for 300 ms.
  BATON_ASSERT_OK(runtime->Submit(MakeItems(64, 1u << 30, 1u << 30)));
  const auto busy_until = Clock::now() + std::chrono::milliseconds(1200);
  while (Clock::now() < busy_until) {
    BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
    EXPECT_EQ(n, 0u);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // no Poll meanwhile
  BATON_ASSERT_OK(runtime->Poll(absl::MakeSpan(out)).status());
  const std::uint64_t busy_steps = runtime->stats().steps;
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport aborted, runtime->Abort());
  EXPECT_EQ(aborted.in_flight.size(), 64u);
  for (const WorkItem& item : aborted.in_flight) ledger_.Forget(item.id);
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  size_t expected = ledger_.completed();  // the warm-up's completions
  for (int wave = 0; wave < 3; ++wave) {
    BATON_ASSERT_OK(runtime->Submit(MakeItems(96, 20, 200)));
    expected += 96;
    ledger_.PollUntil(*runtime, expected, std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the engine is idle
    BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
    EXPECT_EQ(n, 0u);
  }
  BATON_ASSERT_OK(runtime->Stop().status());
  EXPECT_GT(busy_steps, 100u) << "the loop should have run through the busy phase";
}

// Seeded = completed + handed back, exactly, across Start/Stop/Abort cycles
// with items still queued: after Stop every unfinished item is still queued
// (nothing in flight); after Abort the in-flight items come back and the rest
// stay queued. Aborted items are resubmitted; at the end every item has
// completed exactly once.
TEST_P(ReliabilityTest, SeededEqualsCompletedPlusDrainedAcrossRestarts) {
  RuntimeOptions options;
  options.max_batch = 16;
  options.queue_capacity = 2048;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, MakeRuntime(options));
  std::set<std::uint32_t> outstanding;  // submitted, not completed, not handed back
  std::vector<WorkItem> handed_back;
  auto submit = [&](const std::vector<WorkItem>& items) {
    BATON_ASSERT_OK(runtime->Submit(items));
    for (const WorkItem& item : items) EXPECT_TRUE(outstanding.insert(item.id).second);
  };
  auto complete = [&](const Completion& c) {
    ledger_.Account(c);
    EXPECT_EQ(outstanding.erase(c.id), 1u) << "id " << c.id << " was not outstanding";
  };
  submit(MakeItems(300, 1, 60));
  std::vector<Completion> out(32);
  for (int cycle = 0; cycle < 6; ++cycle) {
    SCOPED_TRACE(::testing::Message() << "cycle " << cycle);
    BATON_ASSERT_OK(runtime->Start(GetParam()));
    submit(handed_back);
    handed_back.clear();
    submit(MakeItems(40, 1, 60));
    for (int polls = 0; polls < 3;) {
      BATON_ASSERT_OK_AND_ASSIGN(const size_t n, runtime->Poll(absl::MakeSpan(out)));
      for (size_t i = 0; i < n; ++i) complete(out[i]);
      if (n > 0) ++polls;
    }
    const bool abort = cycle % 2 == 1;
    BATON_ASSERT_OK_AND_ASSIGN(const StopReport report, abort ? runtime->Abort() : runtime->Stop());
    for (const Completion& c : report.completions) complete(c);
    if (abort) {
      for (const WorkItem& item : report.in_flight) {
        EXPECT_EQ(outstanding.erase(item.id), 1u) << "in-flight id " << item.id;
        handed_back.push_back(WorkItem::make(1, item.id, ledger_.needed().at(item.id)));
      }
    } else {
      EXPECT_TRUE(report.in_flight.empty());
    }
    EXPECT_EQ(outstanding.size(), report.still_queued) << "seeded != completed + drained";
    EXPECT_GT(report.still_queued, 0u) << "the test wants items still queued at each stop";
  }
  BATON_ASSERT_OK(runtime->Start(GetParam()));
  submit(handed_back);
  BATON_ASSERT_OK(testing::PollUntil(*runtime, [&] { return outstanding.empty(); }, complete,
                                     {std::chrono::seconds(60), 32}));
  BATON_ASSERT_OK_AND_ASSIGN(const StopReport last, runtime->Stop());
  EXPECT_EQ(last.still_queued, 0u);
  EXPECT_TRUE(outstanding.empty());
  EXPECT_EQ(ledger_.completed(), ledger_.needed().size());
}

INSTANTIATE_TEST_SUITE_P(Engines, ReliabilityTest, ::testing::ValuesIn(testing::AllEngines()),
                         testing::EngineTestName);

}  // namespace
}  // namespace baton
