// Injected device faults. A step kernel traps or writes to an unmapped
// address inside the running loop; that poisons the process's CUDA context
// (a sticky error), so each case runs in a child process (a gtest death test
// in "threadsafe" style re-executes this binary and runs only that test) that
// does all the CUDA work and exits with the number of the first failed check
// (0 when all pass). The parent does no CUDA work that the fault could touch,
// so GpuTest's device-health check in the parent stays meaningful.
//
// Checked in the child: the first Poll after the fault returns the sticky
// error once, clearly (Internal; the engine, the step, the CUDA error, that
// the context is lost and the process must restart); every later call
// (Poll, Submit, Start, Stop, Abort, Trace) returns FailedPrecondition naming
// the original failure instead of raw CUDA errors; destroying the runtime
// neither hangs nor crashes. And when: never before the fault, and by the
// first Poll begun a millisecond after CUDA reports the fault (Poll checks
// with a stream query at most a millisecond apart).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <cuda/atomic>

#include "absl/time/time.h"
#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/runtime.h"
#include "reliability_test_kernels.h"
#include "runtime_test_kernels.h"
#include "support/engine_list.h"
#include "support/gpu_test.h"
#include "support/poll.h"

namespace baton {
namespace {

using FaultCase = std::tuple<Engine, test::Fault>;
using SystemWord = cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// Prints what a check saw; returns `code` when it failed, 0 when it passed.
int Check(bool ok, int code, const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "[%s] check %d: %s: %s\n", ok ? "pass" : "FAIL", code, what.c_str(),
               status.ToString().c_str());
  return ok ? 0 : code;
}

const char* EngineLabel(Engine engine) {
  return engine == Engine::kTailLaunch ? "tail-launch engine" : "conditional engine";
}

// A running loop whose step kernel faults once the gate is armed.
struct FaultingLoop {
  MappedHostBuffer<std::uint32_t> gate;
  DeviceBuffer<std::uint32_t> runs;
  std::unique_ptr<Runtime> runtime;  // destroyed first (declared last)
  std::vector<WorkItem> items;
};

// Starts `loop` and polls it a few times: 0, or the exit code of what failed.
int StartFaultingLoop(Engine engine, test::Fault fault, FaultingLoop& loop) {
  absl::StatusOr<MappedHostBuffer<std::uint32_t>> gate = MappedHostBuffer<std::uint32_t>::Create(1);
  absl::StatusOr<DeviceBuffer<std::uint32_t>> runs = DeviceBuffer<std::uint32_t>::Create(64);
  if (!gate.ok() || !runs.ok() || !runs->Fill(0).ok()) return 1;
  loop.gate = *std::move(gate);
  loop.runs = *std::move(runs);
  *loop.gate.host() = test::kGateIdle;
  RuntimeOptions options;
  options.max_batch = 8;
  options.trace_capacity = 1024;
  absl::StatusOr<std::unique_ptr<Runtime>> created = Runtime::Create(options);
  if (!created.ok()) return 2;
  loop.runtime = *std::move(created);
  StepProgram program;
  program.name = "faulting countdown";
  program.buckets = PowerOfTwoBuckets(options.max_batch);
  std::uint32_t* gate_device = loop.gate.device();
  std::uint32_t* runs_device = loop.runs.data();
  // An address no allocation covers: the null page.
  auto* unmapped = reinterpret_cast<std::uint32_t*>(std::uintptr_t{0x100});
  program.enqueue = [=](const StepContext& context, cudaStream_t stream) -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(test::EnqueueFaultOnce(gate_device, fault, unmapped, stream));
    BATON_CUDA_RETURN_IF_ERROR(
        test::EnqueueCountdownStep(context.args, context.bucket_size, runs_device, stream));
    return absl::OkStatus();
  };
  if (!loop.runtime->RegisterStepProgram(std::move(program)).ok()) return 3;
  for (std::uint32_t i = 0; i < 20; ++i) loop.items.push_back(WorkItem::make(1, i, 1u << 30));
  if (!loop.runtime->Submit(loop.items).ok()) return 4;
  if (!loop.runtime->Start(engine).ok()) return 5;
  std::vector<Completion> out(8);
  for (int i = 0; i < 10; ++i) {
    if (!loop.runtime->Poll(absl::MakeSpan(out)).ok()) return 6;
  }
  return 0;
}

SystemWord GateOf(FaultingLoop& loop) { return SystemWord(*loop.gate.host()); }

const char* ExpectedError(test::Fault fault) {
  return fault == test::Fault::kTrap ? "cudaErrorLaunchFailure" : "cudaErrorIllegalAddress";
}

// The first child's whole life: returns its exit code.
int RunFaultChild(Engine engine, test::Fault fault) {
  FaultingLoop loop;
  if (const int setup = StartFaultingLoop(engine, fault, loop); setup != 0) return setup;
  std::unique_ptr<Runtime>& runtime = loop.runtime;
  const std::vector<WorkItem>& items = loop.items;
  std::vector<Completion> out(8);
  GateOf(loop).store(test::kGateArmed, cuda::std::memory_order_release);

  // Polls until one fails (none completes: the items never finish).
  int polls = 0;
  const absl::Status first =
      testing::PollUntil(*runtime, [] { return false; }, nullptr,
                         {std::chrono::seconds(10), out.size(), [&polls] { ++polls; }});
  std::fprintf(stderr, "the fault surfaced after %d polls\n", polls);
  // Also on stdout, which the parent passes through: the log shows the message.
  std::printf("[ fault ] %s\n", first.ToString().c_str());
  std::fflush(stdout);
  const char* expected_error = ExpectedError(fault);
  int failed = 0;
  auto note = [&failed](int code) {
    if (failed == 0) failed = code;
  };
  note(Check(first.code() == absl::StatusCode::kInternal, 10, "first Poll is Internal", first));
  note(Check(Contains(first.message(), "hit a sticky CUDA error"), 11, "names a sticky error",
             first));
  note(Check(Contains(first.message(), expected_error), 12, std::string("names ") + expected_error,
             first));
  note(Check(Contains(first.message(), EngineLabel(engine)), 13, "names the engine", first));
  note(Check(Contains(first.message(), "during or after step "), 14, "names the step", first));
  note(Check(Contains(first.message(), "restart the process"), 15, "says to restart", first));

  auto later = [&](int code, const char* what, const absl::Status& status) {
    note(Check(status.code() == absl::StatusCode::kFailedPrecondition &&
                   Contains(status.message(), "failed earlier") &&
                   Contains(status.message(), expected_error),
               code, what, status));
  };
  later(20, "second Poll", runtime->Poll(absl::MakeSpan(out)).status());
  later(21, "third Poll", runtime->Poll(absl::MakeSpan(out)).status());
  later(22, "Submit", runtime->Submit(items));
  later(23, "Start", runtime->Start(engine));
  later(24, "Stop", runtime->Stop().status());
  later(25, "Abort", runtime->Abort().status());
  later(26, "Trace", runtime->Trace().status());
  note(Check(!runtime->running(), 27, "not running", absl::OkStatus()));
  runtime.reset();  // must neither hang nor crash
  std::fprintf(stderr, "runtime destroyed\n");
  return failed;
}

// The second child: when the fault is reported. Each round the test reads
// the gate, queries an idle stream of its own (which reports the sticky error
// as soon as CUDA knows of it, whatever the runtime does) and calls Poll. The
// runtime's clock (absl::Now) times it all. Returns the exit code.
int RunFaultNoticeChild(Engine engine, test::Fault fault) {
  FaultingLoop loop;
  if (const int setup = StartFaultingLoop(engine, fault, loop); setup != 0) return setup;
  absl::StatusOr<Stream> own = CreateStream();
  if (!own.ok() || cudaStreamQuery(own->get()) != cudaSuccess) return 7;
  SystemWord gate = GateOf(loop);
  std::vector<Completion> out(8);
  gate.store(test::kGateArmed, cuda::std::memory_order_release);
  std::optional<absl::Time> began, cuda_reported;
  absl::Time reported;
  absl::Status first;
  int late_polls = 0;  // Polls begun a millisecond after CUDA reported the fault that returned OK
  for (const absl::Time deadline = absl::Now() + absl::Seconds(10);
       first.ok() && absl::Now() < deadline;) {
    if (!began && gate.load(cuda::std::memory_order_acquire) != test::kGateArmed) {
      began = absl::Now();
    }
    if (!cuda_reported) {
      const cudaError_t query = cudaStreamQuery(own->get());
      if (query != cudaSuccess && query != cudaErrorNotReady) cuda_reported = absl::Now();
    }
    const absl::Time poll_start = absl::Now();
    first = loop.runtime->Poll(absl::MakeSpan(out)).status();
    reported = absl::Now();
    if (first.ok() && cuda_reported && poll_start - *cuda_reported >= absl::Milliseconds(1)) {
      ++late_polls;
    }
  }
  // The gate read after the report: "started" reached the host before the fault happened.
  const bool after_fault = gate.load(cuda::std::memory_order_acquire) != test::kGateArmed;
  const cudaError_t own_after = cudaStreamQuery(own->get());
  const auto us = [](absl::Duration d) { return absl::ToDoubleMicroseconds(d); };
  if (began && cuda_reported) {
    std::printf(
        "[ fault ] %s: CUDA reported it %.1f us after the faulting kernel began, Poll %.1f us "
        "after CUDA\n",
        ExpectedError(fault), us(*cuda_reported - *began), us(reported - *cuda_reported));
  } else if (began) {
    std::printf(
        "[ fault ] %s: Poll reported it %.1f us after the faulting kernel began, before "
        "the test's own query saw it\n",
        ExpectedError(fault), us(reported - *began));
  }
  std::fflush(stdout);
  int failed = 0;
  auto note = [&failed](int code) {
    if (failed == 0) failed = code;
  };
  note(Check(first.code() == absl::StatusCode::kInternal, 30, "Poll reports Internal", first));
  note(Check(after_fault, 31, "the report came after the faulting kernel began", first));
  note(Check(own_after != cudaSuccess && own_after != cudaErrorNotReady, 32,
             std::string("the test's own query reports the error: ") + cudaGetErrorName(own_after),
             first));
  note(Check(late_polls == 0, 33,
             std::to_string(late_polls) +
                 " Poll(s) begun a millisecond or more after CUDA reported the fault returned OK",
             first));
  std::fprintf(stderr, "fault notice checked\n");
  return failed;
}

class DeviceFaultTest : public testing::GpuTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(DeviceFaultTest, StickyErrorIsReportedOnceThenEveryCallIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto [engine, fault] = GetParam();
  EXPECT_EXIT(std::_Exit(RunFaultChild(engine, fault)), ::testing::ExitedWithCode(0),
              "runtime destroyed");
}

// Poll checks for a lost context with a stream query at most a millisecond
// apart while the loop runs: it reports the fault never before the fault, and
// by the first Poll begun a millisecond after CUDA reports it.
TEST_P(DeviceFaultTest, PollReportsTheFaultAMillisecondAfterCudaAtTheLatest) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto [engine, fault] = GetParam();
  EXPECT_EXIT(std::_Exit(RunFaultNoticeChild(engine, fault)), ::testing::ExitedWithCode(0),
              "fault notice checked");
}

INSTANTIATE_TEST_SUITE_P(
    EnginesAndFaults, DeviceFaultTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllEngines()),
                       ::testing::Values(test::Fault::kTrap, test::Fault::kOutOfBoundsWrite)),
    [](const ::testing::TestParamInfo<FaultCase>& info) {
      const std::string engine = testing::EngineTestName({std::get<0>(info.param), info.index});
      return engine + (std::get<1>(info.param) == test::Fault::kTrap ? "Trap" : "OutOfBoundsWrite");
    });

}  // namespace
}  // namespace baton
