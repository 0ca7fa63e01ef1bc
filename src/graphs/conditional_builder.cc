#include "baton/conditional_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"

namespace baton {
namespace {

absl::string_view ConditionalTypeName(cudaGraphConditionalNodeType type, size_t bodies) {
  switch (type) {
    case cudaGraphCondTypeIf:
      return bodies == 2 ? "IF/ELSE" : "IF";
    case cudaGraphCondTypeWhile:
      return "WHILE";
    case cudaGraphCondTypeSwitch:
      return "SWITCH";
    default:
      return "unknown";
  }
}

}  // namespace

GraphSection::GraphSection(cudaGraph_t graph, cudaStream_t stream, std::string position, int device,
                           std::vector<GraphNodeFinding>* findings)
    : graph_(graph),
      stream_(stream),
      position_(std::move(position)),
      device_(device),
      findings_(findings) {}

absl::StatusOr<cudaGraphConditionalHandle> GraphSection::CreateHandle(unsigned int default_value,
                                                                      bool assign_default) {
  cudaGraphConditionalHandle handle{};
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphConditionalHandleCreate(
      &handle, graph_, default_value, assign_default ? cudaGraphCondAssignDefault : 0));
  return handle;
}

absl::Status GraphSection::Capture(EnqueueFn enqueue) {
  BATON_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCaptureToGraph(stream_, graph_, tail_.empty() ? nullptr : tail_.data(),
                                    nullptr, tail_.size(), cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue(stream_);
  // The stream's frontier after the callable is what later work depends on.
  cudaStreamCaptureStatus capture_status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* frontier = nullptr;
  size_t frontier_size = 0;
  const cudaError_t queried = cudaStreamGetCaptureInfo(stream_, &capture_status, nullptr, nullptr,
                                                       &frontier, nullptr, &frontier_size);
  std::vector<cudaGraphNode_t> next_tail;
  if (queried == cudaSuccess && frontier != nullptr) {
    next_tail.assign(frontier, frontier + frontier_size);
  }
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &captured);
  BATON_RETURN_IF_ERROR(enqueued);
  BATON_CUDA_RETURN_IF_ERROR(queried);
  if (ended != cudaSuccess || capture_status != cudaStreamCaptureStatusActive) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "capture into ", position_, " was invalidated (", cudaGetErrorName(ended),
        "): the callable must enqueue only on the stream it is given; discard this builder"));
  }
  tail_ = std::move(next_tail);
  return absl::OkStatus();
}

absl::Status GraphSection::AddConditional(cudaGraphConditionalHandle handle,
                                          cudaGraphConditionalNodeType type,
                                          absl::Span<const SectionFiller> bodies) {
  cudaGraphNodeParams params{};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = type;
  params.conditional.size = static_cast<unsigned int>(bodies.size());
  cudaGraphNode_t node = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphAddNode(&node, graph_, tail_.empty() ? nullptr : tail_.data(),
                                              nullptr, tail_.size(), &params));
  size_t index = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph_, nullptr, &index));
  const std::string node_position =
      absl::StrCat(position_ == "root" ? "" : absl::StrCat(position_, " > "), "node ", index - 1,
                   " (conditional ", ConditionalTypeName(type, bodies.size()), ")");
  for (size_t i = 0; i < bodies.size(); ++i) {
    cudaGraph_t body_graph = params.conditional.phGraph_out[i];
    GraphSection body(body_graph, stream_, absl::StrCat(node_position, " > body ", i), device_,
                      findings_);
    if (bodies[i]) BATON_RETURN_IF_ERROR(bodies[i](body));
    // Nested conditional bodies were checked by their own sections; this
    // checks the nodes (and child graphs) of this body.
    BATON_ASSIGN_OR_RETURN(std::vector<GraphNodeFinding> found,
                           InspectGraph(body_graph, GraphLaunchMode::kHost, device_));
    for (GraphNodeFinding& finding : found) {
      finding.position = absl::StrCat(body.position(), " > ", finding.position);
      findings_->push_back(std::move(finding));
    }
  }
  tail_.assign(1, node);
  return absl::OkStatus();
}

absl::Status GraphSection::If(cudaGraphConditionalHandle handle, const SectionFiller& then_body) {
  return AddConditional(handle, cudaGraphCondTypeIf, absl::MakeConstSpan(&then_body, 1));
}

absl::Status GraphSection::IfElse(cudaGraphConditionalHandle handle, const SectionFiller& then_body,
                                  const SectionFiller& else_body) {
  const SectionFiller bodies[] = {then_body, else_body};
  return AddConditional(handle, cudaGraphCondTypeIf, bodies);
}

absl::Status GraphSection::While(cudaGraphConditionalHandle handle, const SectionFiller& body) {
  return AddConditional(handle, cudaGraphCondTypeWhile, absl::MakeConstSpan(&body, 1));
}

absl::Status GraphSection::Switch(cudaGraphConditionalHandle handle,
                                  absl::Span<const SectionFiller> bodies) {
  if (bodies.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SWITCH in ", position_, " needs at least one body"));
  }
  return AddConditional(handle, cudaGraphCondTypeSwitch, bodies);
}

absl::Status ConditionalGraph::Launch(cudaStream_t stream) const {
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_.get(), stream));
  return absl::OkStatus();
}

absl::StatusOr<ConditionalGraphBuilder> ConditionalGraphBuilder::Create(std::string name) {
  ConditionalGraphBuilder builder;
  builder.name_ = std::move(name);
  int device = 0;
  BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  BATON_ASSIGN_OR_RETURN(builder.graph_, CreateGraph());
  BATON_ASSIGN_OR_RETURN(builder.capture_stream_, CreateStream());
  builder.findings_ = std::make_unique<std::vector<GraphNodeFinding>>();
  builder.root_.reset(new GraphSection(builder.graph_.get(), builder.capture_stream_.get(), "root",
                                       device, builder.findings_.get()));
  return builder;
}

absl::StatusOr<ConditionalGraph> ConditionalGraphBuilder::Build(cudaStream_t stream) {
  if (!graph_ || root_ == nullptr) {
    return absl::FailedPreconditionError(
        "ConditionalGraphBuilder::Build: the builder was already built; create a new one");
  }
  GraphInventory inventory;
  BATON_ASSIGN_OR_RETURN(
      std::vector<GraphNodeFinding> found,
      InspectGraph(graph_.get(), GraphLaunchMode::kHost, root_->device_, &inventory));
  found.insert(found.end(), findings_->begin(), findings_->end());
  BATON_RETURN_IF_ERROR(RefusalStatus(name_, GraphLaunchMode::kHost, found));
  // Host launch only: the device-launch flag would be refused for conditional
  // nodes anyway, and a device handle to this graph must never exist.
  BATON_ASSIGN_OR_RETURN(GraphExec exec, InstantiateGraph(graph_.get(), 0));
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphUpload(exec.get(), stream));
  root_.reset();
  return ConditionalGraph(std::move(graph_), std::move(exec), inventory);
}

}  // namespace baton
