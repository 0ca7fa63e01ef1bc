#include "scheduler_node.h"

#include "baton/status.h"
#include "scheduler_launch.h"

namespace baton::detail {

absl::Status CaptureSchedulerNode(Engine engine, const SchedulerParams* params, cudaStream_t stream,
                                  ConditionalRole role, std::uint32_t body_bucket) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusActive) {
    return absl::FailedPreconditionError(
        "the scheduler node must be captured into a graph: a kernel that device-launches "
        "graphs fails with cudaErrorNotSupported when launched outside one");
  }
  BATON_CUDA_RETURN_IF_ERROR(engine == Engine::kTailLaunch
                                 ? EnqueueTailLaunchScheduler(params, stream)
                                 : EnqueueConditionalScheduler(params, role, body_bucket, stream));
  return absl::OkStatus();
}

}  // namespace baton::detail
