#include "engines/program_checks.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace baton::detail {

absl::Status ValidateDeviceStep(const StepProgram& program, std::uint32_t max_batch) {
  const DeviceStepProgram& step = program.device_step;
  if (!step.present()) return absl::OkStatus();
  if (step.launch == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name,
        "': device_step.launch is null: take the whole DeviceStepProgram from the library that "
        "provides the device step (e.g. DecoderModel::MakeStepProgram)"));
  }
  if (step.params == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step program '", program.name,
        "': device_step.params is null: point it at the step's parameters in device memory"));
  }
  if (step.max_batch != 0 && step.max_batch < max_batch) {
    const std::string fix =
        step.max_batch_option != nullptr
            ? absl::StrCat("set ", step.max_batch_option, " = ", max_batch,
                           " or lower RuntimeOptions.max_batch")
            : absl::StrCat("build the device step for ", max_batch, " or lower max_batch");
    return absl::InvalidArgumentError(
        absl::StrCat("step program '", program.name, "': its device step serves batches up to ",
                     step.max_batch, " but RuntimeOptions.max_batch is ", max_batch, ": ", fix));
  }
  return absl::OkStatus();
}

absl::Status CheckProgramFitsEngine(const StepProgram& program, std::uint32_t max_batch,
                                    Engine engine) {
  if (engine == Engine::kDynamicParallelism) {
    if (!program.device_step.is_valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Start(Engine::kDynamicParallelism): step program '", program.name,
          "' has no device step: set StepProgram::device_step to a device step program (e.g. "
          "from DecoderModel::MakeStepProgram); device code can launch only kernels linked into "
          "the same device link as Baton's dynamic-parallelism scheduler"));
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
  if (program.buckets.back() < max_batch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Start(Engine::", name, "): step program '", program.name, "': the largest bucket (",
        program.buckets.back(), ") is smaller than RuntimeOptions.max_batch (", max_batch,
        "), so some batches fit no graph: add a bucket of at least ", max_batch,
        " or start Engine::kDynamicParallelism (its grids follow the actual batch)"));
  }
  return absl::OkStatus();
}

std::vector<DeviceBucketEntry> DynamicParallelismSizes(const StepProgram& program,
                                                       std::uint32_t max_batch) {
  std::vector<DeviceBucketEntry> entries;
  for (std::uint32_t size : program.buckets) entries.push_back({nullptr, size, 0});
  if (program.buckets.empty() || program.buckets.back() < max_batch) {
    entries.push_back({nullptr, max_batch, 0});
  }
  return entries;
}

}  // namespace baton::detail
