#include "dp_engine.h"

#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "baton/device_error_word.h"
#include "baton/status.h"
#include "dp_scheduler_launch.h"

namespace baton::detail {

absl::Status ValidateDeviceStep(const StepProgram& program, const RuntimeOptions& options) {
  const DeviceStepProgram& step = program.device_step;
  if (step.kind == DeviceStepKind::kNone) return absl::OkStatus();
  if (step.kind != DeviceStepKind::kSynthetic && step.kind != DeviceStepKind::kDecoder) {
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "': device_step.kind ",
                     static_cast<std::uint32_t>(step.kind),
                     " is not a DeviceStepKind: use one of baton/device_step.h"));
  }
  if (step.params == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name,
        "': device_step.params is null: point it at the kind's parameters in device memory"));
  }
  if (step.max_batch != 0 && step.max_batch < options.max_batch) {
    const std::string fix =
        step.kind == DeviceStepKind::kDecoder
            ? absl::StrCat("create the DecoderModel with DecoderModelOptions::max_batch = ",
                           options.max_batch, " or lower RuntimeOptions.max_batch")
            : absl::StrCat("build the device step for ", options.max_batch, " or lower max_batch");
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name, "': its device step serves batches up to ", step.max_batch,
        " but RuntimeOptions.max_batch is ", options.max_batch, ": ", fix));
  }
  return absl::OkStatus();
}

absl::Status CheckProgramFitsEngine(const StepProgram& program, const RuntimeOptions& options,
                                    Engine engine) {
  if (engine == Engine::kDynamicParallelism) {
    if (!program.device_step.is_valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Start(Engine::kDynamicParallelism): step program '", program.name,
          "' has no device step: set StepProgram::device_step to one of Baton's device step "
          "programs (e.g. from SyntheticStepProgram or DecoderModel::MakeStepProgram); device "
          "code can launch only kernels "
          "linked into Baton's dynamic-parallelism library"));
    }
    return absl::OkStatus();
  }
  const char* name = engine == Engine::kTailLaunch ? "kTailLaunch" : "kConditional";
  if (!program.enqueue || program.buckets.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Start(Engine::", name, "): step program '", program.name,
        "' has no enqueue function or no buckets, so it has no graphs: give both, or start "
        "Engine::kDynamicParallelism"));
  }
  if (program.buckets.back() < options.max_batch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Start(Engine::", name, "): step program '", program.name, "': the largest bucket (",
        program.buckets.back(), ") is smaller than RuntimeOptions.max_batch (", options.max_batch,
        "), so some batches fit no graph: add a bucket of at least ", options.max_batch,
        " or start Engine::kDynamicParallelism (its grids follow the actual batch)"));
  }
  return absl::OkStatus();
}

std::vector<DeviceBucketEntry> DynamicParallelismBuckets(const StepProgram& program,
                                                         std::uint32_t max_batch) {
  std::vector<DeviceBucketEntry> entries;
  for (std::uint32_t size : program.buckets) entries.push_back({nullptr, size, 0});
  if (program.buckets.empty() || program.buckets.back() < max_batch) {
    entries.push_back({nullptr, max_batch, 0});
  }
  return entries;
}

absl::Status LaunchDynamicParallelismEngine(const SchedulerParams* params,
                                            const DeviceStepProgram& step, cudaStream_t stream) {
  BATON_CUDA_RETURN_IF_ERROR(LaunchDynamicParallelismScheduler(params, step, stream));
  return absl::OkStatus();
}

absl::Status ExplainDynamicParallelismFailure(absl::Status why, std::uint32_t error_word) {
  if (why.ok() || DeviceErrorSiteOf(error_word) != DeviceErrorSite::kKernelLaunch) return why;
  const auto error = static_cast<cudaError_t>(DeviceErrorCodeOf(error_word));
  const char* limit = nullptr;
  if (error == cudaErrorLaunchPendingCountExceeded) {
    limit =
        "the device runtime's pending launch limit (cudaLimitDevRuntimePendingLaunchCount) was "
        "exceeded: launch fewer kernels per step, or raise the limit with cudaDeviceSetLimit";
  } else if (error == cudaErrorInvalidValue) {
    limit =
        "CUDA refused a launch into cudaStreamTailLaunch (it allows one pending self-launch per "
        "grid; the scheduler makes exactly one, after the step's kernels): launch fewer kernels "
        "per step or report this";
  } else {
    limit = "a kernel launch into cudaStreamTailLaunch was refused: launch fewer kernels per step";
  }
  return absl::Status(why.code(), absl::StrCat(why.message(), "; ", limit));
}

}  // namespace baton::detail
