// launch_comparison: what it costs to decide, every step, whether to run the
// next step. A step is K tiny kernels; the loop stops when a counter the step
// bumps reaches a target that only the device data holds. Every mode runs the
// same kernels for the same N steps and must end in the same state.

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/runtime.h"
#include "baton/status.h"
#include "baton/step_graph.h"
#include "baton/trace.h"
#include "common/init.h"
#include "common/report.h"
#include "common/timing.h"
#include "fixtures/synthetic_step.h"
#include "launch_comparison/loop_state.h"

ABSL_FLAG(std::string, kernels, "1,3,10,30", "comma-separated kernels per step (K), each <= 32");
ABSL_FLAG(int, steps, 2000, "steps per timed run (N)");
ABSL_FLAG(int, repeats, 11, "timed runs per mode (the median is reported)");
ABSL_FLAG(bool, raw_dp, true,
          "time the raw dynamic-parallelism mode (the mechanism's floor); false reports it as n/a");
ABSL_FLAG(std::string, trace, "",
          "write the device trace of one Baton tail-launch engine run (K=3, or the first K) as "
          "Chrome/Perfetto JSON to this file (open it in ui.perfetto.dev)");

namespace baton::samples {
namespace {

struct Loop {
  Stream stream;
  DeviceBuffer<LoopState> state;
  MappedHostBuffer<std::uint32_t> readback;
  LoopState initial{};
};

// The raw modes' graphs go through the graph toolkit like any user graph:
// captured, validated and certified for device launch.
template <typename Enqueue>
absl::StatusOr<DeviceGraph> Capture(cudaStream_t stream, const char* name, Enqueue enqueue) {
  CertifyOptions options;
  options.name = name;
  return CaptureDeviceGraph(
      stream,
      [&](cudaStream_t s) -> absl::Status {
        BATON_CUDA_RETURN_IF_ERROR(enqueue(s));
        return absl::OkStatus();
      },
      options);
}

// Host-driven decision: copy the counter back, wait for it, decide.
absl::StatusOr<bool> HostSeesDone(Loop& loop, int steps) {
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(loop.readback.host(), &loop.state.data()->steps_done,
                                             sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                                             loop.stream.get()));
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(loop.stream.get()));
  return loop.readback.host()[0] >= static_cast<std::uint32_t>(steps);
}

absl::Status Verify(Loop& loop, int kernels, int steps, const std::string& mode, Report& report) {
  LoopState final_state{};
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&final_state, loop.state.data(), sizeof(LoopState), cudaMemcpyDeviceToHost));
  BATON_RETURN_IF_ERROR(DeviceErrorStatus(final_state.error_word, mode));
  bool ok = final_state.steps_done == static_cast<std::uint32_t>(steps);
  for (int k = 0; k < kernels && ok; ++k) {
    std::uint32_t expected = loop.initial.values[k];
    for (int s = 0; s < steps; ++s) expected = NextValue(expected, k);
    ok = final_state.values[k] == expected;
  }
  if (!ok) {
    report.Fail(absl::StrCat(mode, " (K=", kernels, "): ran ", final_state.steps_done,
                             " steps or produced wrong values; expected ", steps, " steps"));
  }
  return absl::OkStatus();
}

constexpr char kTracedTailLaunch[] = "Baton tail-launch engine, trace on";

// The trace of the runtime's last engine run (the events after the exit
// before it) as Chrome/Perfetto JSON.
absl::Status WriteLastRunTrace(const Runtime& runtime, const std::string& path, Report& report) {
  BATON_ASSIGN_OR_RETURN(const std::vector<TraceEvent> events, runtime.Trace());
  size_t begin = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    if (events[i].type == TraceEventType::kExit) begin = i + 1;
  }
  const std::vector<TraceEvent> run(events.begin() + begin, events.end());
  BATON_RETURN_IF_ERROR(WriteTraceJson(run, path));
  report.SetParam("trace file", path);
  report.SetParam("trace events", static_cast<std::int64_t>(run.size()));
  std::cout << "wrote the trace of one tail-launch engine run (" << run.size() << " events) to "
            << path << "\n";
  return absl::OkStatus();
}

absl::Status RunKernelCount(int kernels, int steps, int repeats, int sm_count, int trace_kernels,
                            Loop& loop, Report& report) {
  cudaStream_t stream = loop.stream.get();
  loop.initial = LoopState{};
  loop.initial.target = steps;
  for (int k = 0; k < kMaxStepKernels; ++k) loop.initial.values[k] = 0x1000u * (k + 1);
  auto reset = [&]() -> absl::Status {
    BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(loop.state.data(), &loop.initial, sizeof(LoopState),
                                               cudaMemcpyHostToDevice, stream));
    return absl::OkStatus();
  };

  // Graphs: the step alone (host-launched modes and the separate scheduler's
  // target), the separate scheduler, and the step with the scheduler fused in.
  BATON_ASSIGN_OR_RETURN(DeviceGraph step, Capture(stream, "step", [&](cudaStream_t s) {
                           return EnqueueStepKernels(loop.state.data(), kernels, s);
                         }));
  BATON_ASSIGN_OR_RETURN(DeviceGraph separate,
                         Capture(stream, "separate scheduler", [&](cudaStream_t s) {
                           return EnqueueSeparateScheduler(step.handle(), loop.state.data(), s);
                         }));
  BATON_ASSIGN_OR_RETURN(
      DeviceGraph fused, Capture(stream, "step with fused scheduler", [&](cudaStream_t s) {
        const cudaError_t error = EnqueueStepKernels(loop.state.data(), kernels, s);
        return error != cudaSuccess ? error : EnqueueFusedScheduler(loop.state.data(), s);
      }));

  // Experimental: programmatic dependent launch inside a device-launched
  // graph. CUDA may refuse it at certification or instantiation; then the row
  // says why instead of timing it.
  absl::StatusOr<DeviceGraph> fused_pdl = Capture(
      stream, "step with fused scheduler, PDL",
      [&](cudaStream_t s) { return EnqueueFusedStepWithPdl(loop.state.data(), kernels, s); });
  if (!fused_pdl.ok()) {
    report.SetParam(absl::StrCat("K=", kernels, " fused+PDL unavailable"),
                    std::string(fused_pdl.status().message()));
  }

  struct Mode {
    std::string name;
    std::function<absl::Status()> body;
    std::function<absl::Status()> setup;  // default: reset the loop state
    cudaStream_t stream = nullptr;        // default: the loop's stream
    bool unavailable = false;             // reported as n/a, not timed
    bool synthetic = false;               // runs the synthetic program, not the loop state
  };

  // The Baton engines drive the same kernels as a step program: one item that
  // asks for `steps` steps, submitted before each timed Start. The events go
  // on the runtime's stream, where the whole device loop completes.
  RuntimeOptions runtime_options;
  runtime_options.max_batch = 1;
  runtime_options.mailbox_capacity = 2;
  runtime_options.queue_capacity = 32;
  // The same step with one bucket and with two (the multi-bucket conditional
  // engine's structure; the batch of 1 always fits the first bucket).
  auto make_runtime = [&](std::vector<std::uint32_t> buckets,
                          RuntimeOptions options =
                              RuntimeOptions{}) -> absl::StatusOr<std::unique_ptr<Runtime>> {
    options.max_batch = runtime_options.max_batch;
    options.mailbox_capacity = runtime_options.mailbox_capacity;
    options.queue_capacity = runtime_options.queue_capacity;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> runtime, Runtime::Create(options));
    StepProgram program;
    program.name = absl::StrCat("launch_comparison K=", kernels);
    program.buckets = std::move(buckets);
    program.enqueue = [&loop, kernels](const StepContext& context, cudaStream_t s) -> absl::Status {
      BATON_CUDA_RETURN_IF_ERROR(
          EnqueueEngineStepKernels(loop.state.data(), kernels, context.args, s));
      return absl::OkStatus();
    };
    BATON_RETURN_IF_ERROR(runtime->RegisterStepProgram(std::move(program)));
    return runtime;
  };
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> one_bucket, make_runtime({1}));
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> two_buckets, make_runtime({1, 2}));
  // The dynamic-parallelism engine can launch only Baton's own device step
  // programs, so it runs the synthetic step (the same K kernels on every
  // engine); the tail-launch engine runs it too, for a like-for-like row.
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> synthetic, Runtime::Create(runtime_options));
  {
    SyntheticStepOptions options;
    options.name = absl::StrCat("launch_comparison synthetic K=", kernels);
    options.kernels = static_cast<std::uint32_t>(kernels);
    options.max_batch = runtime_options.max_batch;
    options.buckets = {1};
    BATON_ASSIGN_OR_RETURN(StepProgram program, SyntheticStepProgram(options));
    BATON_RETURN_IF_ERROR(synthetic->RegisterStepProgram(std::move(program)));
  }
  // What the reliability features cost, side by side with the default (trace
  // off, watchdog on): the device trace on, and the watchdog's per-step
  // progress store off.
  RuntimeOptions traced_options;
  traced_options.trace_capacity = 1u << 16;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> traced, make_runtime({1}, traced_options));
  RuntimeOptions one_step_options;
  one_step_options.tail_steps_per_launch = 1;
  one_step_options.conditional_steps_per_iteration = 1;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> one_step, make_runtime({1}, one_step_options));
  RuntimeOptions two_step_options;
  two_step_options.tail_steps_per_launch = 2;
  two_step_options.conditional_steps_per_iteration = 2;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> two_steps, make_runtime({1}, two_step_options));
  RuntimeOptions eight_step_options;
  eight_step_options.tail_steps_per_launch = 8;
  eight_step_options.conditional_steps_per_iteration = 8;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> eight_steps,
                         make_runtime({1}, eight_step_options));
  RuntimeOptions unwatched_options;
  unwatched_options.watchdog_timeout = absl::InfiniteDuration();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> unwatched, make_runtime({1}, unwatched_options));
  // An engine stays started across its timed runs, the way a server runs it:
  // each run submits one item and the idle engine relaunches on its stream;
  // the item's completion comes back through Poll.
  std::vector<Completion> engine_completions;
  int engine_runs = 0;
  Runtime* current = nullptr;
  Engine engine_in_use = Engine::kTailLaunch;
  auto check_last_run = [&](const std::string& name, bool synthetic_program) {
    const bool wrong_value =
        synthetic_program && !engine_completions.empty() &&
        engine_completions[0].value != SyntheticExpectedValue(7, steps, kernels);
    if (engine_runs > 0 &&
        (engine_completions.size() != 1 || engine_completions[0].id != 7 ||
         engine_completions[0].steps != static_cast<std::uint32_t>(steps) || wrong_value)) {
      report.Fail(absl::StrCat(name, " (K=", kernels, "): expected one completion after ", steps,
                               " steps", synthetic_program ? " with the reference value" : "",
                               ", got ", engine_completions.size()));
    }
    engine_completions.clear();
  };
  auto collect_until_idle = [&]() -> absl::Status {
    std::vector<Completion> out(4);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (bool idle = false;;) {
      BATON_ASSIGN_OR_RETURN(const size_t n, current->Poll(absl::MakeSpan(out)));
      engine_completions.insert(engine_completions.end(), out.begin(), out.begin() + n);
      if (idle) return absl::OkStatus();  // one more Poll after the engine ended
      const RuntimeStats stats = current->stats();
      idle = stats.engine_exits >= stats.engine_launches;
      if (!idle && absl::Now() > deadline) {
        return absl::DeadlineExceededError("launch_comparison: the engine did not finish its run");
      }
    }
  };
  auto engine_mode = [&](const char* name, Runtime* runtime, Engine engine,
                         bool synthetic_program = false) {
    auto setup = [&, name, runtime, engine, synthetic_program]() -> absl::Status {
      if (current != runtime || engine_in_use != engine || !runtime->running()) {
        if (current != nullptr && current->running()) {
          BATON_RETURN_IF_ERROR(current->Stop().status());
        }
        if (runtime->running()) BATON_RETURN_IF_ERROR(runtime->Stop().status());
        BATON_RETURN_IF_ERROR(runtime->Start(engine));
        current = runtime;
        engine_in_use = engine;
        engine_runs = 0;
      }
      BATON_RETURN_IF_ERROR(collect_until_idle());
      check_last_run(name, synthetic_program);
      BATON_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(loop.state.data(), &loop.initial, sizeof(LoopState), cudaMemcpyHostToDevice));
      return absl::OkStatus();
    };
    auto body = [&, runtime]() -> absl::Status {
      ++engine_runs;
      const WorkItem item = WorkItem::make(1, 7, static_cast<std::uint64_t>(steps));
      return runtime->Submit(absl::MakeConstSpan(&item, 1));
    };
    return Mode{name, body, setup, runtime->stream(), false, synthetic_program};
  };
  const std::vector<Mode> modes = {
      {"host launches + sync",
       [&]() -> absl::Status {
         for (;;) {
           BATON_CUDA_RETURN_IF_ERROR(EnqueueStepKernels(loop.state.data(), kernels, stream));
           BATON_ASSIGN_OR_RETURN(const bool done, HostSeesDone(loop, steps));
           if (done) return absl::OkStatus();
         }
       }},
      {"host graph + sync",
       [&]() -> absl::Status {
         for (;;) {
           BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(step.handle(), stream));
           BATON_ASSIGN_OR_RETURN(const bool done, HostSeesDone(loop, steps));
           if (done) return absl::OkStatus();
         }
       }},
      {"host graph pipelined, no decision",
       [&]() -> absl::Status {
         for (int s = 0; s < steps; ++s) {
           BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(step.handle(), stream));
         }
         return absl::OkStatus();
       }},
      {"device: scheduler graph + step graph",
       [&]() -> absl::Status {
         BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(separate.handle(), stream));
         return absl::OkStatus();
       }},
      {"device: scheduler fused into step graph",
       [&]() -> absl::Status {
         // The first step is unconditional (steps >= 1); each step's scheduler
         // node decides whether its graph runs again.
         BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(fused.handle(), stream));
         return absl::OkStatus();
       }},
      {"device: fused + programmatic launch (PDL)",
       [&]() -> absl::Status {
         BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(fused_pdl->handle(), stream));
         return absl::OkStatus();
       },
       nullptr, nullptr, !fused_pdl.ok()},
      engine_mode("Baton tail-launch engine", one_bucket.get(), Engine::kTailLaunch),
      engine_mode("Baton tail-launch engine, 1 step per launch", one_step.get(),
                  Engine::kTailLaunch),
      engine_mode("Baton tail-launch engine, 2 steps per launch", two_steps.get(),
                  Engine::kTailLaunch),
      engine_mode("Baton tail-launch engine, 8 steps per launch", eight_steps.get(),
                  Engine::kTailLaunch),
      engine_mode("Baton conditional engine", one_bucket.get(), Engine::kConditional),
      engine_mode("Baton conditional engine, 1 step per iteration", one_step.get(),
                  Engine::kConditional),
      engine_mode("Baton conditional engine, 2 steps per iteration", two_steps.get(),
                  Engine::kConditional),
      engine_mode("Baton conditional engine, 8 steps per iteration", eight_steps.get(),
                  Engine::kConditional),
      engine_mode("Baton conditional engine, 2 buckets", two_buckets.get(), Engine::kConditional),
      engine_mode("Baton tail-launch engine, synthetic step", synthetic.get(), Engine::kTailLaunch,
                  /*synthetic_program=*/true),
      engine_mode("Baton DP engine, synthetic step", synthetic.get(), Engine::kDynamicParallelism,
                  /*synthetic_program=*/true),
      engine_mode(kTracedTailLaunch, traced.get(), Engine::kTailLaunch),
      engine_mode("Baton conditional engine, trace on", traced.get(), Engine::kConditional),
      engine_mode("Baton tail-launch engine, watchdog off", unwatched.get(), Engine::kTailLaunch),
      engine_mode("Baton conditional engine, watchdog off", unwatched.get(), Engine::kConditional),
      {"dynamic parallelism",
       [&]() -> absl::Status {
         BATON_CUDA_RETURN_IF_ERROR(
             LaunchDynamicParallelismLoop(loop.state.data(), kernels, stream));
         return absl::OkStatus();
       },
       nullptr, nullptr, !absl::GetFlag(FLAGS_raw_dp)},
      {"persistent kernel (floor)",
       [&]() -> absl::Status {
         BATON_CUDA_RETURN_IF_ERROR(
             LaunchPersistentLoop(loop.state.data(), kernels, sm_count, stream));
         return absl::OkStatus();
       }},
  };

  std::vector<TimingSummary> timings;
  for (const Mode& mode : modes) {
    if (mode.unavailable) {
      TimingSummary none;
      none.median_ms = none.min_ms = none.max_ms = std::numeric_limits<double>::quiet_NaN();
      timings.push_back(none);
      continue;
    }
    BATON_ASSIGN_OR_RETURN(
        TimingSummary timing,
        TimeWithEvents(mode.stream != nullptr ? mode.stream : stream, /*warmup=*/2, repeats,
                       mode.body, mode.setup ? mode.setup : reset));
    if (mode.setup) {
      // The last engine run: its single item must come back exactly once,
      // after exactly `steps` steps (setup checked every earlier run).
      BATON_RETURN_IF_ERROR(collect_until_idle());
      check_last_run(mode.name, mode.synthetic);
    }
    // The synthetic program leaves the loop state alone; its completion
    // value was checked above instead.
    if (!mode.synthetic) BATON_RETURN_IF_ERROR(Verify(loop, kernels, steps, mode.name, report));
    timings.push_back(std::move(timing));
    if (mode.name == kTracedTailLaunch && kernels == trace_kernels &&
        !absl::GetFlag(FLAGS_trace).empty()) {
      BATON_RETURN_IF_ERROR(WriteLastRunTrace(*traced, absl::GetFlag(FLAGS_trace), report));
    }
  }
  // The references the speed-ups are taken against: the two host-driven
  // loops (plain launches, and CUDA graphs as PyTorch CUDA graphs and
  // vLLM-style loops use), and whichever of them was faster at this K (a
  // graph launch costs more than a single kernel launch, so at K = 1 plain
  // launches can win).
  const double host_launches_us = timings[0].median_ms * 1e3 / steps;
  const double host_graph_us = timings[1].median_ms * 1e3 / steps;
  const double faster_host_us = std::min(host_launches_us, host_graph_us);
  report.SetParam(absl::StrCat("K=", kernels, " faster host loop"),
                  modes[host_launches_us <= host_graph_us ? 0 : 1].name);
  for (size_t m = 0; m < modes.size(); ++m) {
    const double us = timings[m].median_ms * 1e3 / steps;
    report.AddRow()
        .Set("K", static_cast<std::int64_t>(kernels))
        .Set("mode", modes[m].name)
        .Set("us/step", us)
        .Set("min", timings[m].min_ms * 1e3 / steps)
        .Set("max", timings[m].max_ms * 1e3 / steps)
        .Set("vs host launches+sync", host_launches_us / us)
        .Set("vs host graph+sync", host_graph_us / us)
        .Set("vs faster host", faster_host_us / us);
  }
  return absl::OkStatus();
}

absl::Status Run(Report& report) {
  const int steps = absl::GetFlag(FLAGS_steps);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (steps < 1 || repeats < 1)
    return absl::InvalidArgumentError("--steps and --repeats must be >= 1");
  std::vector<int> kernel_counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_kernels), ',')) {
    int k = 0;
    if (!absl::SimpleAtoi(part, &k) || k < 1 || k > kMaxStepKernels) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kernels: '", part, "' is not a kernel count in [1, ", kMaxStepKernels, "]"));
    }
    kernel_counts.push_back(k);
  }
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  report.SetParam("steps", static_cast<std::int64_t>(steps));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));

  Loop loop;
  BATON_ASSIGN_OR_RETURN(loop.stream, CreateStream());
  BATON_ASSIGN_OR_RETURN(loop.state, DeviceBuffer<LoopState>::Create(1));
  BATON_ASSIGN_OR_RETURN(loop.readback, MappedHostBuffer<std::uint32_t>::Create(1));
  const int trace_kernels =
      std::find(kernel_counts.begin(), kernel_counts.end(), 3) != kernel_counts.end()
          ? 3
          : kernel_counts.front();
  for (int kernels : kernel_counts) {
    BATON_RETURN_IF_ERROR(RunKernelCount(kernels, steps, repeats, device.multiprocessors,
                                         trace_kernels, loop, report));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  return baton::samples::RunSample(
      argc, argv, "launch_comparison",
      "Compares ways of driving a step of K tiny kernels with a stop decided on the device every "
      "step: host launches/graphs with a sync per step, pipelined host graphs (no decision), "
      "device tail launches (separate scheduler graph, scheduler fused into the step graph), "
      "Baton's engines (tail-launch, conditional, dynamic-parallelism), raw dynamic parallelism, "
      "and a persistent kernel. Needs an H100/H200.",
      baton::samples::Run);
}
