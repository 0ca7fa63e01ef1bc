// Conditional graphs (the conditional engine): IF, IF/ELSE, WHILE and SWITCH
// nodes whose bodies are filled by stream capture or by nested sections.
//
// Measured on CUDA 13.0 (docs/cuda-facts.md, G1 and C1): device-launch instantiation
// refuses conditional nodes, and a conditional body that device-launches a
// graph hangs. So a conditional graph is its own type, ConditionalGraph,
// launched only from the host; it never converts to a DeviceGraph, the bucket
// table accepts only DeviceGraphs, and CertifyDeviceGraph refuses any graph
// holding a conditional node. Kernels set the handles with
// baton/conditional_device.cuh or EnqueueSetConditional (baton/set_conditional.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "baton/cuda_resources.h"
#include "baton/graph_validation.h"
#include "baton/step_graph.h"

namespace baton {

class GraphSection;
// Fills a conditional body (a nested section) in order.
using SectionFiller = std::function<absl::Status(GraphSection&)>;

// One graph being filled in order: the root of a conditional graph or one body
// of a conditional node. Each call appends after everything appended before.
class GraphSection {
 public:
  GraphSection(const GraphSection&) = delete;
  GraphSection& operator=(const GraphSection&) = delete;

  // A handle for a conditional node of THIS section (CUDA ties a handle to the
  // graph that holds its node). With `assign_default` the handle is reset to
  // `default_value` at every launch of the graph.
  [[nodiscard]] absl::StatusOr<cudaGraphConditionalHandle> CreateHandle(
      unsigned int default_value = 0, bool assign_default = true);

  // Captures what `enqueue` puts on the stream it is given into this section.
  [[nodiscard]] absl::Status Capture(EnqueueFn enqueue);

  // Runs `then_body` when the handle is non-zero.
  [[nodiscard]] absl::Status If(cudaGraphConditionalHandle handle, const SectionFiller& then_body);
  // Runs `then_body` when the handle is non-zero, `else_body` otherwise.
  [[nodiscard]] absl::Status IfElse(cudaGraphConditionalHandle handle,
                                    const SectionFiller& then_body, const SectionFiller& else_body);
  // Runs `body` while the handle is non-zero (checked before each iteration);
  // the body must set the handle or it loops forever.
  [[nodiscard]] absl::Status While(cudaGraphConditionalHandle handle, const SectionFiller& body);
  // Runs bodies[handle]; a value >= bodies.size() runs nothing.
  [[nodiscard]] absl::Status Switch(cudaGraphConditionalHandle handle,
                                    absl::Span<const SectionFiller> bodies);

  // "root" or "node 2 (conditional WHILE) > body 0" (named in refusals).
  [[nodiscard]] const std::string& position() const { return position_; }

 private:
  friend class ConditionalGraphBuilder;
  GraphSection(cudaGraph_t graph, cudaStream_t stream, std::string position, int device,
               std::vector<GraphNodeFinding>* findings);
  absl::Status AddConditional(cudaGraphConditionalHandle handle, cudaGraphConditionalNodeType type,
                              absl::Span<const SectionFiller> bodies);

  cudaGraph_t graph_;
  cudaStream_t stream_;
  std::string position_;
  int device_;
  std::vector<GraphNodeFinding>* findings_;  // refusals inside bodies, owned by the builder
  std::vector<cudaGraphNode_t> tail_;        // what the next appended work depends on
};

// A host-launch graph holding conditional nodes, instantiated and uploaded.
// Deliberately not convertible to DeviceGraph and without a device handle.
class ConditionalGraph {
 public:
  ConditionalGraph(ConditionalGraph&&) noexcept = default;
  ConditionalGraph& operator=(ConditionalGraph&&) noexcept = default;

  [[nodiscard]] absl::Status Launch(cudaStream_t stream) const;
  [[nodiscard]] const GraphInventory& inventory() const { return inventory_; }

 private:
  friend class ConditionalGraphBuilder;
  ConditionalGraph(Graph graph, GraphExec exec, GraphInventory inventory)
      : graph_(std::move(graph)), exec_(std::move(exec)), inventory_(inventory) {}
  Graph graph_;
  GraphExec exec_;
  GraphInventory inventory_;
};

class ConditionalGraphBuilder {
 public:
  // `name` appears in every refusal.
  [[nodiscard]] static absl::StatusOr<ConditionalGraphBuilder> Create(
      std::string name = "conditional graph");
  ConditionalGraphBuilder(ConditionalGraphBuilder&&) noexcept = default;
  ConditionalGraphBuilder& operator=(ConditionalGraphBuilder&&) noexcept = default;

  [[nodiscard]] GraphSection& root() { return *root_; }

  // Validates the whole graph (every body was checked as it was filled) for
  // host launch, instantiates WITHOUT the device-launch flag and uploads on
  // `stream`. The builder is spent afterwards.
  [[nodiscard]] absl::StatusOr<ConditionalGraph> Build(cudaStream_t stream);

 private:
  ConditionalGraphBuilder() = default;
  std::string name_;
  Graph graph_;
  Stream capture_stream_;
  std::unique_ptr<std::vector<GraphNodeFinding>> findings_;
  std::unique_ptr<GraphSection> root_;
};

}  // namespace baton
