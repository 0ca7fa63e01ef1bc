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
// neither hangs nor crashes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <cuda/atomic>

#include "baton/bucket_table.h"
#include "baton/cuda_resources.h"
#include "baton/runtime.h"
#include "reliability_test_kernels.h"
#include "runtime_test_kernels.h"
#include "support/engine_list.h"
#include "support/gpu_test.h"

namespace baton {
namespace {

using FaultCase = std::tuple<Engine, test::Fault>;

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

// The child's whole life: returns its exit code.
int RunFaultChild(Engine engine, test::Fault fault) {
  absl::StatusOr<MappedHostBuffer<std::uint32_t>> gate = MappedHostBuffer<std::uint32_t>::Create(1);
  absl::StatusOr<DeviceBuffer<std::uint32_t>> runs = DeviceBuffer<std::uint32_t>::Create(64);
  if (!gate.ok() || !runs.ok() || !runs->Fill(0).ok()) return 1;
  *gate->host() = test::kGateIdle;
  RuntimeOptions options;
  options.max_batch = 8;
  options.trace_capacity = 1024;
  absl::StatusOr<std::unique_ptr<Runtime>> created = Runtime::Create(options);
  if (!created.ok()) return 2;
  std::unique_ptr<Runtime> runtime = *std::move(created);
  StepProgram program;
  program.name = "faulting countdown";
  program.buckets = PowerOfTwoBuckets(options.max_batch);
  std::uint32_t* gate_device = gate->device();
  std::uint32_t* runs_device = runs->data();
  // An address no allocation covers: the null page.
  auto* unmapped = reinterpret_cast<std::uint32_t*>(std::uintptr_t{0x100});
  program.enqueue = [=](const StepContext& context, cudaStream_t stream) -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(test::EnqueueFaultOnce(gate_device, fault, unmapped, stream));
    BATON_CUDA_RETURN_IF_ERROR(
        test::EnqueueCountdownStep(context.args, context.bucket_size, runs_device, stream));
    return absl::OkStatus();
  };
  if (!runtime->RegisterStepProgram(std::move(program)).ok()) return 3;
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < 20; ++i) items.push_back(WorkItem::make(1, i, 1u << 30));
  if (!runtime->Submit(items).ok()) return 4;
  if (!runtime->Start(engine).ok()) return 5;
  std::vector<Completion> out(8);
  for (int i = 0; i < 10; ++i) {
    if (!runtime->Poll(absl::MakeSpan(out)).ok()) return 6;
  }
  cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system>(*gate->host())
      .store(test::kGateArmed, cuda::std::memory_order_release);

  absl::Status first;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int polls = 0;
  while (first.ok() && std::chrono::steady_clock::now() < deadline) {
    first = runtime->Poll(absl::MakeSpan(out)).status();
    ++polls;
  }
  std::fprintf(stderr, "the fault surfaced after %d polls\n", polls);
  // Also on stdout, which the parent passes through: the log shows the message.
  std::printf("[ fault ] %s\n", first.ToString().c_str());
  std::fflush(stdout);
  const char* expected_error =
      fault == test::Fault::kTrap ? "cudaErrorLaunchFailure" : "cudaErrorIllegalAddress";
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

class DeviceFaultTest : public testing::GpuTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(DeviceFaultTest, StickyErrorIsReportedOnceThenEveryCallIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto [engine, fault] = GetParam();
  EXPECT_EXIT(std::_Exit(RunFaultChild(engine, fault)), ::testing::ExitedWithCode(0),
              "runtime destroyed");
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
