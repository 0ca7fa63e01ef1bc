#include "baton/graph_validation.h"

#include <cuda.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/status.h"
#include "foundation/enum_table.h"

namespace baton {
namespace {

// Each node type once: its name in refusals and what to do instead of it
// (empty: allowed), in both launch modes or (device_only) in device launch
// alone. The conditional engine keeps the whole loop on the GPU, so host
// launch refuses the same host round trips and allocations as device launch.
struct NodeTypeRow {
  cudaGraphNodeType value;
  absl::string_view name;
  absl::string_view fix;
  bool device_only;
};
constexpr NodeTypeRow kNodeTypes[] = {
    {cudaGraphNodeTypeKernel, "kernel", "", false},
    {cudaGraphNodeTypeMemcpy, "memcpy", "", false},
    {cudaGraphNodeTypeMemset, "memset", "", false},
    {cudaGraphNodeTypeHost, "host", kHostNodeFix, false},
    {cudaGraphNodeTypeGraph, "child graph", "", false},
    {cudaGraphNodeTypeEmpty, "empty", kEmptyNodeFix, true},
    {cudaGraphNodeTypeWaitEvent, "event wait", kEventNodeFix, false},
    {cudaGraphNodeTypeEventRecord, "event record", kEventNodeFix, false},
    {cudaGraphNodeTypeExtSemaphoreSignal, "external semaphore signal", kSemaphoreNodeFix, false},
    {cudaGraphNodeTypeExtSemaphoreWait, "external semaphore wait", kSemaphoreNodeFix, false},
    {cudaGraphNodeTypeMemAlloc, "memory allocation", kMemAllocNodeFix, false},
    {cudaGraphNodeTypeMemFree, "memory free", kMemFreeNodeFix, false},
    {cudaGraphNodeTypeConditional, "conditional", kConditionalNodeFix, true},
};

// The kernel-node device check goes through the driver API (the runtime API
// does not say which context a kernel node runs in). The entry points are
// looked up once; where the driver lacks them the check is skipped and only
// memcpy/memset operands are checked.
struct KernelContextQuery {
  using GetParams = CUresult(CUDAAPI*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*);
  using CtxDevice = CUresult(CUDAAPI*)(CUdevice*, CUcontext);
  GetParams get_params = nullptr;
  CtxDevice ctx_device = nullptr;
};

const KernelContextQuery& KernelContext() {
  static const KernelContextQuery query = [] {
    KernelContextQuery q;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &fn, 12000,
                                         cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      q.get_params = reinterpret_cast<KernelContextQuery::GetParams>(fn);
    }
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetDevice", &fn, 13000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      q.ctx_device = reinterpret_cast<KernelContextQuery::CtxDevice>(fn);
    }
    (void)cudaGetLastError();
    return q;
  }();
  return query;
}

// The device a kernel node runs on, or -1 when it cannot be told.
int KernelNodeDevice(cudaGraphNode_t node) {
  const KernelContextQuery& query = KernelContext();
  if (query.get_params == nullptr || query.ctx_device == nullptr) return -1;
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  if (query.get_params(reinterpret_cast<CUgraphNode>(node), &params) != CUDA_SUCCESS) return -1;
  if (params.ctx == nullptr) return -1;
  CUdevice device = -1;
  if (query.ctx_device(&device, params.ctx) != CUDA_SUCCESS) return -1;
  return static_cast<int>(device);
}

// Where `ptr` lives: its device for device memory, -1 for host memory that is
// pinned or managed, -2 for pageable host memory.
constexpr int kPinnedOrManaged = -1;
constexpr int kPageable = -2;
int PointerDevice(const void* ptr) {
  if (ptr == nullptr) return kPinnedOrManaged;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return kPinnedOrManaged;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
      return attributes.device;
    case cudaMemoryTypeUnregistered:
      return kPageable;
    default:
      return kPinnedOrManaged;
  }
}

std::string WrongDeviceFix(absl::string_view what, int found, int expected) {
  return absl::StrCat(what, " is on device ", found, " but the graph is for device ", expected,
                      ": capture every node of a graph with device ", expected,
                      " current (cudaSetDevice before capture)");
}

struct Walker {
  GraphLaunchMode mode;
  int device;
  GraphInventory* inventory;
  std::vector<GraphNodeFinding>* findings;

  void Refuse(cudaGraphNodeType type, const std::string& position, std::string fix) {
    findings->push_back(GraphNodeFinding{type, position, std::move(fix)});
  }

  absl::Status CheckOperand(cudaGraphNodeType type, const std::string& position,
                            absl::string_view what, const void* ptr) {
    const int where = PointerDevice(ptr);
    if (where == kPageable) {
      if (mode == GraphLaunchMode::kDevice) {
        Refuse(type, position,
               absl::StrCat(what,
                            " is pageable host memory: use device memory or pinned mapped host "
                            "memory (cudaHostAlloc with cudaHostAllocMapped)"));
      }
    } else if (where >= 0 && where != device) {
      Refuse(type, position, WrongDeviceFix(what, where, device));
    }
    return absl::OkStatus();
  }

  absl::Status Walk(cudaGraph_t graph, const std::string& prefix) {
    size_t count = 0;
    BATON_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    if (count > 0) BATON_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nodes.data(), &count));
    for (size_t i = 0; i < count; ++i) {
      cudaGraphNodeType type = cudaGraphNodeTypeKernel;
      BATON_CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(nodes[i], &type));
      const std::string position = absl::StrCat(prefix, "node ", i);
      if (inventory != nullptr) ++inventory->nodes;
      const absl::string_view fix = RefusalFix(type, mode);
      if (!fix.empty()) Refuse(type, position, std::string(fix));
      switch (type) {
        case cudaGraphNodeTypeKernel: {
          if (inventory != nullptr) ++inventory->kernel_nodes;
          const int on = KernelNodeDevice(nodes[i]);
          if (on >= 0 && on != device) Refuse(type, position, WrongDeviceFix("kernel", on, device));
          break;
        }
        case cudaGraphNodeTypeMemcpy: {
          if (inventory != nullptr) ++inventory->memcpy_nodes;
          cudaMemcpy3DParms params{};
          if (cudaGraphMemcpyNodeGetParams(nodes[i], &params) != cudaSuccess) {
            // Some captured copies (e.g. to symbols) have no 3D description;
            // instantiation still checks their operands.
            (void)cudaGetLastError();
            break;
          }
          if ((params.srcArray != nullptr || params.dstArray != nullptr) &&
              mode == GraphLaunchMode::kDevice) {
            Refuse(type, position,
                   "copies a CUDA array: device-launched graphs may copy only linear device "
                   "memory or pinned mapped host memory");
          }
          BATON_RETURN_IF_ERROR(CheckOperand(type, position, "memcpy source", params.srcPtr.ptr));
          BATON_RETURN_IF_ERROR(
              CheckOperand(type, position, "memcpy destination", params.dstPtr.ptr));
          break;
        }
        case cudaGraphNodeTypeMemset: {
          if (inventory != nullptr) ++inventory->memset_nodes;
          cudaMemsetParams params{};
          BATON_CUDA_RETURN_IF_ERROR(cudaGraphMemsetNodeGetParams(nodes[i], &params));
          BATON_RETURN_IF_ERROR(CheckOperand(type, position, "memset destination", params.dst));
          break;
        }
        case cudaGraphNodeTypeGraph: {
          if (inventory != nullptr) ++inventory->child_graphs;
          cudaGraph_t child = nullptr;
          BATON_CUDA_RETURN_IF_ERROR(cudaGraphChildGraphNodeGetGraph(nodes[i], &child));
          BATON_RETURN_IF_ERROR(Walk(child, absl::StrCat(position, " (child graph) > ")));
          break;
        }
        case cudaGraphNodeTypeConditional:
          // CUDA 13.0 offers no query from a conditional node to its bodies;
          // the conditional builder validates each body as it fills it.
          if (inventory != nullptr) ++inventory->conditional_nodes;
          break;
        default:
          break;
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

absl::string_view GraphNodeTypeName(cudaGraphNodeType type) {
  return ColumnOf(kNodeTypes, type, &NodeTypeRow::name, "unknown");
}

absl::string_view GraphLaunchModeName(GraphLaunchMode mode) {
  return mode == GraphLaunchMode::kDevice ? "device launch" : "host launch";
}

absl::string_view RefusalFix(cudaGraphNodeType type, GraphLaunchMode mode) {
  const NodeTypeRow* row = FindRow(kNodeTypes, type);
  if (row == nullptr) {
    return "unknown node type: only kernel, memcpy, memset and child-graph nodes are allowed";
  }
  return row->device_only && mode != GraphLaunchMode::kDevice ? absl::string_view() : row->fix;
}

absl::Status RefusalStatus(absl::string_view graph_name, GraphLaunchMode mode,
                           absl::Span<const GraphNodeFinding> findings) {
  if (findings.empty()) return absl::OkStatus();
  std::string message =
      absl::StrFormat("graph '%s' cannot be certified for %s: %d node%s refused:", graph_name,
                      GraphLaunchModeName(mode), findings.size(), findings.size() == 1 ? "" : "s");
  for (const GraphNodeFinding& finding : findings) {
    absl::StrAppend(&message, " [", finding.position, ": ", GraphNodeTypeName(finding.type),
                    " node] ", finding.fix, ";");
  }
  message.pop_back();
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<std::vector<GraphNodeFinding>> InspectGraph(cudaGraph_t graph, GraphLaunchMode mode,
                                                           int device, GraphInventory* inventory) {
  if (graph == nullptr) return absl::InvalidArgumentError("InspectGraph: graph is null");
  if (device < 0) BATON_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  GraphInventory local;
  std::vector<GraphNodeFinding> findings;
  Walker walker{mode, device, &local, &findings};
  BATON_RETURN_IF_ERROR(walker.Walk(graph, ""));
  if (mode == GraphLaunchMode::kDevice &&
      local.kernel_nodes + local.memcpy_nodes + local.memset_nodes == 0) {
    findings.push_back(
        GraphNodeFinding{cudaGraphNodeTypeEmpty, "whole graph", std::string(kNoWorkFix)});
  }
  if (inventory != nullptr) *inventory = local;
  return findings;
}

absl::Status ValidateGraph(cudaGraph_t graph, GraphLaunchMode mode, absl::string_view graph_name,
                           int device, GraphInventory* inventory) {
  BATON_ASSIGN_OR_RETURN(const std::vector<GraphNodeFinding> findings,
                         InspectGraph(graph, mode, device, inventory));
  return RefusalStatus(graph_name, mode, findings);
}

}  // namespace baton
