#include "engines/scheduler_nodes.h"

#include "baton/status.h"
#include "scheduler_nodes_launch.h"

namespace baton::detail {

namespace {

absl::Status RequireCapture(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusActive) {
    return absl::FailedPreconditionError(
        "the scheduler node must be captured into a graph: a kernel that device-launches "
        "graphs fails with cudaErrorNotSupported when launched outside one");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CaptureSchedulerNode(Engine engine, const GraphEngineParams* params,
                                  cudaStream_t stream, ConditionalRole role,
                                  std::uint32_t body_bucket, bool after_inner) {
  BATON_RETURN_IF_ERROR(RequireCapture(stream));
  BATON_CUDA_RETURN_IF_ERROR(
      engine == Engine::kTailLaunch
          ? EnqueueTailLaunchScheduler(params, stream, after_inner)
          : EnqueueConditionalScheduler(params, role, body_bucket, stream, after_inner));
  return absl::OkStatus();
}

absl::Status CaptureTailInnerNode(const GraphEngineParams* params, cudaStream_t stream,
                                  std::uint32_t body_bucket) {
  BATON_RETURN_IF_ERROR(RequireCapture(stream));
  BATON_CUDA_RETURN_IF_ERROR(EnqueueTailInnerScheduler(params, body_bucket, stream));
  return absl::OkStatus();
}

}  // namespace baton::detail
