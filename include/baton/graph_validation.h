// Validation of a CUDA graph before it is instantiated: every node, recursively
// into child graphs and conditional bodies, is checked against what the graph
// will be used for. A refusal names each offending node (type, position) and
// the fix, so nothing that would hang the GPU or poison the context is ever
// instantiated.
//
// Measured on CUDA 13.0 (docs/cuda-facts.md, G1): a graph instantiated for device
// launch may hold only kernel, memcpy, memset and child-graph nodes; conditional
// nodes belong to host-launched graphs (the conditional engine).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace baton {

enum class GraphLaunchMode {
  kDevice,  // instantiated with cudaGraphInstantiateFlagDeviceLaunch (step graphs)
  kHost,    // launched from the host, may hold conditional nodes (conditional engine)
};

// One refused node: what it is, where it sits and what to do instead.
struct GraphNodeFinding {
  cudaGraphNodeType type = cudaGraphNodeTypeKernel;
  // "node 3", or through child graphs and conditional bodies:
  // "node 1 (child graph) > node 0", "node 2 (conditional WHILE) > body 0 > node 4".
  std::string position;
  // The fix, or for device mismatches and pageable copies what is wrong and the fix.
  std::string fix;
};

// What a walk over a graph found (all levels).
struct GraphInventory {
  std::size_t nodes = 0;
  std::size_t kernel_nodes = 0;
  std::size_t memcpy_nodes = 0;
  std::size_t memset_nodes = 0;
  std::size_t child_graphs = 0;
  std::size_t conditional_nodes = 0;
};

// The documented refusal messages (tests assert these exact texts).
inline constexpr absl::string_view kHostNodeFix =
    "move host work out of the step or use a device-side kernel";
inline constexpr absl::string_view kEventNodeFix =
    "record or wait on events outside the graph (before or after its launch); a step graph must "
    "not synchronize with other streams";
inline constexpr absl::string_view kSemaphoreNodeFix =
    "signal or wait on external semaphores outside the graph";
inline constexpr absl::string_view kMemAllocNodeFix =
    "cuBLAS allocated a workspace during capture: pass an explicit workspace (and allocate "
    "every buffer before capture; cudaMallocAsync inside a capture makes this node)";
inline constexpr absl::string_view kMemFreeNodeFix =
    "cuBLAS freed a workspace during capture: pass an explicit workspace (and free buffers "
    "outside the graph; cudaFreeAsync inside a capture makes this node)";
inline constexpr absl::string_view kConditionalNodeFix =
    "conditional graphs are for host launch (the conditional engine); device-launched graphs may "
    "hold only kernel, memcpy, memset and child-graph nodes";
inline constexpr absl::string_view kEmptyNodeFix =
    "remove the empty node (join dependencies directly); device-launched graphs may hold only "
    "kernel, memcpy, memset and child-graph nodes";
inline constexpr absl::string_view kNoWorkFix =
    "the graph holds no kernel, memcpy or memset node and device launch needs at least one: "
    "capture the step's work into it";

// "kernel", "host", "memory allocation", ... (pure; CPU-testable).
[[nodiscard]] absl::string_view GraphNodeTypeName(cudaGraphNodeType type);
[[nodiscard]] absl::string_view GraphLaunchModeName(GraphLaunchMode mode);

// The fix for a node of `type` in a graph used as `mode`; empty when the type
// is allowed there (pure; CPU-testable).
[[nodiscard]] absl::string_view RefusalFix(cudaGraphNodeType type, GraphLaunchMode mode);

// The refusal Status for `findings` (InvalidArgument), OK when there are none:
// "graph 'decode b=8' cannot be certified for device launch: 2 nodes refused:
//  [node 3: host node] move host work out of ... ; [node 5: ...] ..."
[[nodiscard]] absl::Status RefusalStatus(absl::string_view graph_name, GraphLaunchMode mode,
                                         absl::Span<const GraphNodeFinding> findings);

// Walks every node of `graph` (recursively) and returns the refused ones.
// `device` is the ordinal every node must run on (-1: the current device).
// Fails only when the walk itself fails (a CUDA error).
[[nodiscard]] absl::StatusOr<std::vector<GraphNodeFinding>> InspectGraph(
    cudaGraph_t graph, GraphLaunchMode mode, int device = -1, GraphInventory* inventory = nullptr);

// InspectGraph + RefusalStatus: OK when `graph` may be instantiated for `mode`.
[[nodiscard]] absl::Status ValidateGraph(cudaGraph_t graph, GraphLaunchMode mode,
                                         absl::string_view graph_name = "step graph",
                                         int device = -1, GraphInventory* inventory = nullptr);

}  // namespace baton
