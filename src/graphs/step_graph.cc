#include "baton/step_graph.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"

namespace baton {
namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

absl::string_view UpdateResultName(cudaGraphExecUpdateResult result) {
  switch (result) {
    case cudaGraphExecUpdateSuccess:
      return "success";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "the topology changed (node count, dependencies or exit nodes differ)";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "a node changed type";
    case cudaGraphExecUpdateErrorFunctionChanged:
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "a kernel node changed its function in a way an update cannot apply";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "a node's parameters changed in a way an update cannot apply (e.g. a memset or "
             "memcpy moved to other memory)";
    case cudaGraphExecUpdateErrorNotSupported:
      return "a node does not support updates";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "a node's attributes changed";
    default:
      return "an unexpected update error";
  }
}

}  // namespace

std::string GraphUpdateRefusal(absl::string_view graph_name, cudaGraphExecUpdateResult result) {
  return absl::StrCat("graph '", graph_name,
                      "' cannot be updated in place: ", UpdateResultName(result),
                      "; certify a new DeviceGraph instead (and replace it in its bucket table)");
}

absl::StatusOr<Graph> CaptureGraph(cudaStream_t stream, EnqueueFn enqueue) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return absl::InvalidArgumentError(
        "CaptureGraph: the default stream cannot be captured; create a stream (CreateStream)");
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue(stream);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  Graph graph(raw);
  BATON_RETURN_IF_ERROR(enqueued);
  if (ended != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::Status(CudaErrorCode(ended),
                        absl::StrCat("CaptureGraph: the capture was invalidated (",
                                     cudaGetErrorName(ended), ": ", cudaGetErrorString(ended),
                                     "); the callable must enqueue only on the stream it is given "
                                     "and must not synchronize or query it"));
  }
  return graph;
}

absl::StatusOr<DeviceGraph> CertifyDeviceGraph(Graph graph, cudaStream_t stream,
                                               const CertifyOptions& options) {
  if (!graph) return absl::InvalidArgumentError("CertifyDeviceGraph: graph is null");
  int device = options.device;
  if (device < 0) BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));

  // Validation comes first: nothing refused is ever instantiated or uploaded.
  auto start = std::chrono::steady_clock::now();
  GraphInventory inventory;
  BATON_RETURN_IF_ERROR(
      ValidateGraph(graph.get(), GraphLaunchMode::kDevice, options.name, device, &inventory));
  if (options.timings != nullptr) options.timings->validate_ms = MillisecondsSince(start);

  start = std::chrono::steady_clock::now();
  cudaGraphInstantiateParams params{};
  params.flags = cudaGraphInstantiateFlagDeviceLaunch;
  cudaGraphExec_t raw = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiateWithParams(&raw, graph.get(), &params);
  GraphExec exec(raw);
  if (instantiated != cudaSuccess || params.result_out != cudaGraphInstantiateSuccess) {
    (void)cudaGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        "graph '", options.name,
        "' passed validation but CUDA refused to instantiate it for device "
        "launch (",
        cudaGetErrorName(instantiated), ", instantiate result ",
        static_cast<int>(params.result_out),
        "): kernels that use dynamic parallelism or nodes on several devices cannot be "
        "device-launched"));
  }
  if (options.timings != nullptr) options.timings->instantiate_ms = MillisecondsSince(start);

  start = std::chrono::steady_clock::now();
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), stream));
  if (options.timings != nullptr) options.timings->upload_ms = MillisecondsSince(start);
  return DeviceGraph(std::move(graph), std::move(exec), inventory, options.name, device);
}

absl::StatusOr<DeviceGraph> CaptureDeviceGraph(cudaStream_t stream, EnqueueFn enqueue,
                                               const CertifyOptions& options) {
  BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(stream, enqueue));
  return CertifyDeviceGraph(std::move(graph), stream, options);
}

absl::Status DeviceGraph::Launch(cudaStream_t stream) const {
  if (!exec_) {
    return absl::FailedPreconditionError(
        "DeviceGraph::Launch: this DeviceGraph is empty (moved from); launch the one it was "
        "moved into");
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_.get(), stream));
  return absl::OkStatus();
}

absl::Status DeviceGraph::Update(Graph replacement, cudaStream_t stream) {
  if (!replacement) return absl::InvalidArgumentError("DeviceGraph::Update: graph is null");
  GraphInventory inventory;
  BATON_RETURN_IF_ERROR(ValidateGraph(replacement.get(), GraphLaunchMode::kDevice,
                                      absl::StrCat(name_, " (update)"), device_, &inventory));
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t updated = cudaGraphExecUpdate(exec_.get(), replacement.get(), &info);
  if (updated != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(GraphUpdateRefusal(name_, info.result));
  }
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec_.get(), stream));
  graph_ = std::move(replacement);
  inventory_ = inventory;
  return absl::OkStatus();
}

absl::Status DeviceGraph::UpdateByCapture(cudaStream_t stream, EnqueueFn enqueue) {
  BATON_ASSIGN_OR_RETURN(Graph graph, CaptureGraph(stream, enqueue));
  return Update(std::move(graph), stream);
}

}  // namespace baton
