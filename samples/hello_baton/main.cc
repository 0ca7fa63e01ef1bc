// hello_baton: the smallest device-driven loop. A step graph runs N times; who
// decides whether to run another step differs:
//   host graph + sync : the host launches the step graph, copies the step
//                       counter back, synchronizes and decides (what a
//                       host-driven decode loop does every step);
//   device tail launch: a scheduler kernel in a graph decides on the device and
//                       tail-launches the step graph and then itself.
// Both must reach exactly N steps with the same checksum.
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/device_error.h"
#include "baton/status.h"
#include "common/init.h"
#include "common/report.h"
#include "common/timing.h"
#include "hello_baton/hello_kernels.h"

ABSL_FLAG(int, steps, 2000, "steps per timed run");
ABSL_FLAG(int, repeats, 15, "timed runs per mode (the median is reported)");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");

namespace baton::samples {
namespace {

constexpr std::uint32_t kStateWords = 2;

template <typename Enqueue>
absl::StatusOr<GraphExec> Capture(cudaStream_t stream, unsigned long long flags, Enqueue enqueue) {
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const cudaError_t enqueued = enqueue();
  cudaGraph_t raw = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream, &raw));
  Graph graph(raw);
  BATON_CUDA_RETURN_IF_ERROR(enqueued);
  BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph.get(), flags));
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), stream));
  return exec;
}

absl::Status Run(Report& report) {
  const int steps = absl::GetFlag(FLAGS_steps);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  if (steps < 1 || repeats < 1) {
    return absl::InvalidArgumentError("--steps and --repeats must be at least 1");
  }
  BATON_RETURN_IF_ERROR(RequireDeviceLaunch());
  BATON_ASSIGN_OR_RETURN(const DeviceInfo device, QueryDevice());
  report.SetDevice(device);
  report.SetParam("steps", static_cast<std::int64_t>(steps));
  report.SetParam("repeats", static_cast<std::int64_t>(repeats));

  BATON_ASSIGN_OR_RETURN(Stream stream, CreateStream());
  BATON_ASSIGN_OR_RETURN(auto state, DeviceBuffer<std::uint32_t>::Create(kStateWords));
  BATON_ASSIGN_OR_RETURN(auto error_word, DeviceBuffer<std::uint32_t>::Create(1));
  BATON_ASSIGN_OR_RETURN(auto readback, MappedHostBuffer<std::uint32_t>::Create(kStateWords));
  BATON_RETURN_IF_ERROR(error_word.Fill(0));

  BATON_ASSIGN_OR_RETURN(GraphExec step,
                         Capture(stream.get(), cudaGraphInstantiateFlagDeviceLaunch,
                                 [&] { return EnqueueCountStep(state.data(), stream.get()); }));
  BATON_ASSIGN_OR_RETURN(GraphExec scheduler,
                         Capture(stream.get(), cudaGraphInstantiateFlagDeviceLaunch, [&] {
                           return EnqueueStopOrContinue(step.get(), state.data(), steps,
                                                        error_word.data(), stream.get());
                         }));

  const std::uint32_t expected = ExpectedChecksum(steps);
  auto verify = [&](const char* mode) -> absl::Status {
    std::uint32_t host[kStateWords];
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host, state.data(), sizeof(host), cudaMemcpyDeviceToHost));
    std::uint32_t error = 0;
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(&error, error_word.data(), sizeof(error), cudaMemcpyDeviceToHost));
    BATON_RETURN_IF_ERROR(DeviceErrorStatus(error, mode));
    if (host[0] != static_cast<std::uint32_t>(steps) || host[1] != expected) {
      report.Fail(absl::StrCat(mode, ": ran ", host[0], " steps with checksum ", host[1],
                               ", expected ", steps, " and ", expected));
    }
    return absl::OkStatus();
  };

  // Host-driven: one launch, one copy, one synchronization per step.
  auto host_loop = [&]() -> absl::Status {
    BATON_RETURN_IF_ERROR(state.Fill(0, stream.get()));
    for (;;) {
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(step.get(), stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(readback.host(), state.data(),
                                                 sizeof(std::uint32_t), cudaMemcpyDeviceToHost,
                                                 stream.get()));
      BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
      if (readback.host()[0] >= static_cast<std::uint32_t>(steps)) return absl::OkStatus();
    }
  };
  // Device-driven: the host launches once; the device decides every step.
  auto device_loop = [&]() -> absl::Status {
    BATON_RETURN_IF_ERROR(state.Fill(0, stream.get()));
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(scheduler.get(), stream.get()));
    return absl::OkStatus();
  };

  struct Mode {
    const char* name;
    std::function<absl::Status()> body;
  };
  double host_us = 0;
  for (const Mode& mode :
       {Mode{"host graph + sync", host_loop}, Mode{"device tail launch", device_loop}}) {
    BATON_ASSIGN_OR_RETURN(const TimingSummary timing,
                           TimeWithEvents(stream.get(), /*warmup=*/2, repeats, mode.body));
    BATON_RETURN_IF_ERROR(verify(mode.name));
    const double us_per_step = timing.median_ms * 1e3 / steps;
    if (host_us == 0) host_us = us_per_step;
    report.AddRow()
        .Set("mode", std::string(mode.name))
        .Set("us/step (median)", us_per_step)
        .Set("min", timing.min_ms * 1e3 / steps)
        .Set("max", timing.max_ms * 1e3 / steps)
        .Set("vs host", host_us / us_per_step);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace baton::samples

int main(int argc, char** argv) {
  baton::samples::InitSample(
      argc, argv,
      "A step graph driven N times by the host (launch + sync per step) and by the "
      "device (a scheduler graph tail-launching the step and itself). Needs an H100/H200.");
  baton::samples::Report report("hello_baton");
  const absl::Status status = baton::samples::Run(report);
  if (!status.ok()) {
    std::fprintf(stderr, "hello_baton: %s\n", status.ToString().c_str());
    // No GPU is not a failure of Baton, but the sample could not show anything.
    return status.code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
  }
  report.Print(std::cout);
  const std::string json = absl::GetFlag(FLAGS_json);
  if (!json.empty()) {
    const absl::Status written = report.WriteJson(json);
    if (!written.ok()) {
      std::fprintf(stderr, "hello_baton: %s\n", written.ToString().c_str());
      return 1;
    }
  }
  return report.passed() ? 0 : 1;
}
