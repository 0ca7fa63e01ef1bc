// Step graphs: capture a callable (or take a graph built from nodes), validate
// every node, instantiate for device launch and upload. The result, a
// DeviceGraph, is the only thing Baton ever writes to device memory as a graph
// handle: device-launching a graph that was not instantiated for device launch
// poisons the CUDA context (docs/cuda-facts.md, G6), so the certificate is a type.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "baton/cuda_resources.h"
#include "baton/graph_validation.h"

namespace baton {

// Enqueues work on the given (capturing) stream.
using EnqueueFn = absl::FunctionRef<absl::Status(cudaStream_t)>;

// Captures what `enqueue` puts on `stream` into a new graph (thread-local
// capture mode). The capture always ends, also when `enqueue` fails; its
// Status wins. `stream` must not be the legacy default stream.
[[nodiscard]] absl::StatusOr<Graph> CaptureGraph(cudaStream_t stream, EnqueueFn enqueue);

// Host wall-clock milliseconds of each certification phase (for samples).
struct CertifyTimings {
  double validate_ms = 0;
  double instantiate_ms = 0;
  double upload_ms = 0;  // until cudaGraphUpload returned (it is asynchronous)
};

struct CertifyOptions {
  std::string name = "step graph";  // named in every Status
  int device = -1;                  // every node must run here; -1: the current device
  CertifyTimings* timings = nullptr;
};

class DeviceGraph;

// Validates `graph` for device launch BEFORE instantiating it; refusals name
// every offending node. On success instantiates with
// cudaGraphInstantiateFlagDeviceLaunch and uploads on `stream`.
[[nodiscard]] absl::StatusOr<DeviceGraph> CertifyDeviceGraph(Graph graph, cudaStream_t stream,
                                                             const CertifyOptions& options = {});

// CaptureGraph + CertifyDeviceGraph.
[[nodiscard]] absl::StatusOr<DeviceGraph> CaptureDeviceGraph(cudaStream_t stream, EnqueueFn enqueue,
                                                             const CertifyOptions& options = {});

// A validated graph instantiated for device launch and uploaded. Move-only; only
// CertifyDeviceGraph makes one.
class DeviceGraph {
 public:
  DeviceGraph(DeviceGraph&&) noexcept = default;
  DeviceGraph& operator=(DeviceGraph&&) noexcept = default;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // The executable for device launch (device tables, tail launches).
  [[nodiscard]] cudaGraphExec_t handle() const { return exec_.get(); }
  // The validated source graph the executable was made from.
  [[nodiscard]] cudaGraph_t graph() const { return graph_.get(); }
  [[nodiscard]] const GraphInventory& inventory() const { return inventory_; }
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] int device() const { return device_; }

  // Launches from the host.
  [[nodiscard]] absl::Status Launch(cudaStream_t stream) const;

  // Takes the parameters of `replacement` (same topology, e.g. the same step
  // captured with other pointers or sizes): validates it for device launch,
  // applies it with cudaGraphExecUpdate and re-uploads on `stream`. When the
  // update is structurally impossible the Status says why and this graph is
  // left as it was. The handle does not change, so device tables stay valid.
  // Must not run while this graph may be launched.
  [[nodiscard]] absl::Status Update(Graph replacement, cudaStream_t stream);
  // CaptureGraph + Update.
  [[nodiscard]] absl::Status UpdateByCapture(cudaStream_t stream, EnqueueFn enqueue);

 private:
  friend absl::StatusOr<DeviceGraph> CertifyDeviceGraph(Graph, cudaStream_t, const CertifyOptions&);
  DeviceGraph(Graph graph, GraphExec exec, GraphInventory inventory, std::string name, int device)
      : graph_(std::move(graph)),
        exec_(std::move(exec)),
        inventory_(inventory),
        name_(std::move(name)),
        device_(device) {}

  Graph graph_;
  GraphExec exec_;
  GraphInventory inventory_;
  std::string name_;
  int device_ = -1;
};

// Why cudaGraphExecUpdate refused an update, with the fix (pure; CPU-testable).
[[nodiscard]] std::string GraphUpdateRefusal(absl::string_view graph_name,
                                             cudaGraphExecUpdateResult result);

}  // namespace baton
