// The dynamic-parallelism engine: the program's device step launches the
// step's kernels from the device (engines/dp_scheduler.cuh, compiled into
// the step provider's own device link). Nothing to capture: the scheduler
// only needs the bucket sizes to choose with.
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/bucket_entry.h"
#include "baton/cuda_resources.h"
#include "baton/device_error_word.h"
#include "baton/status.h"
#include "engines/engine_driver.h"
#include "engines/program_checks.h"

namespace baton::detail {
namespace {

class DynamicParallelismEngine final : public EngineDriver {
 public:
  absl::Status Launch(cudaStream_t stream) override {
    BATON_CUDA_RETURN_IF_ERROR(step_.launch(params_.data(), step_.params, stream));
    return absl::OkStatus();
  }

  // Which CUDA limit a refused kernel launch ran into, and what to change.
  absl::Status ExplainFailure(absl::Status why, std::uint32_t error_word) const override {
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
      limit =
          "a kernel launch into cudaStreamTailLaunch was refused: launch fewer kernels per step";
    }
    return absl::Status(why.code(), absl::StrCat(why.message(), "; ", limit));
  }

 private:
  absl::Status Build(const StepProgram& program, const EngineSetup& setup) override {
    step_ = program.device_step;
    SchedulerParams params = setup.scheduler;
    BATON_ASSIGN_OR_RETURN(
        params.buckets,
        UploadBucketSizes(DynamicParallelismSizes(program, setup.max_batch), sizes_));
    BATON_ASSIGN_OR_RETURN(params_, DeviceBuffer<SchedulerParams>::Create(1));
    BATON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(params_.data(), &params, sizeof(params), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }

  DeviceStepProgram step_;
  DeviceBuffer<DeviceBucketEntry> sizes_;
  DeviceBuffer<SchedulerParams> params_;
};

}  // namespace

std::unique_ptr<EngineDriver> CreateDynamicParallelismEngine() {
  return std::make_unique<DynamicParallelismEngine>();
}

}  // namespace baton::detail
