#include "baton/synthetic_step.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/cuda_resources.h"
#include "baton/status.h"
#include "synthetic_step_launch.h"

namespace baton {
namespace {

// Device memory a synthetic program's kernels use; lives as long as any copy
// of the program (its enqueue function holds it).
struct SyntheticState {
  DeviceBuffer<std::uint32_t> accumulators;
  DeviceBuffer<SyntheticStepParams> params;  // the device copy the DP engine reads
  SyntheticStepParams host_params;
};

}  // namespace

absl::StatusOr<StepProgram> SyntheticStepProgram(const SyntheticStepOptions& options) {
  if (options.kernels == 0 || options.kernels > kMaxSyntheticKernels) {
    return absl::InvalidArgumentError(absl::StrCat("SyntheticStepOptions.kernels ", options.kernels,
                                                   " is outside [1, ", kMaxSyntheticKernels, "]"));
  }
  if (options.max_batch == 0) {
    return absl::InvalidArgumentError(
        "SyntheticStepOptions.max_batch is 0: set it to the runtime's RuntimeOptions.max_batch");
  }
  auto state = std::make_shared<SyntheticState>();
  BATON_ASSIGN_OR_RETURN(state->accumulators,
                         DeviceBuffer<std::uint32_t>::Create(options.max_batch));
  BATON_RETURN_IF_ERROR(state->accumulators.Fill(0));
  BATON_ASSIGN_OR_RETURN(state->params, DeviceBuffer<SyntheticStepParams>::Create(1));
  state->host_params =
      SyntheticStepParams{options.kernels, options.max_batch, state->accumulators.data()};
  BATON_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->params.data(), &state->host_params,
                                        sizeof(SyntheticStepParams), cudaMemcpyHostToDevice));

  StepProgram program;
  program.name = options.name;
  program.buckets = options.buckets;
  program.device_step.kind = DeviceStepKind::kSynthetic;
  program.device_step.params = state->params.data();
  program.device_step.max_batch = options.max_batch;
  program.enqueue = [state](const StepContext& context, cudaStream_t stream) -> absl::Status {
    if (context.args.max_batch > state->host_params.capacity) {
      return absl::InvalidArgumentError(
          absl::StrCat("synthetic step: built for max_batch ", state->host_params.capacity,
                       " but the runtime's max_batch is ", context.args.max_batch,
                       ": set SyntheticStepOptions.max_batch to RuntimeOptions.max_batch"));
    }
    BATON_CUDA_RETURN_IF_ERROR(detail::EnqueueSyntheticStep(context.args, state->host_params,
                                                            context.bucket_size, stream));
    return absl::OkStatus();
  };
  return program;
}

}  // namespace baton
