#include "baton/cuda_resources.h"

#include "foundation/nvtx.h"

namespace baton {

absl::StatusOr<Stream> CreateStream(unsigned int flags) {
  cudaStream_t stream = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, flags));
  return Stream(stream);
}

absl::StatusOr<Event> CreateEvent(unsigned int flags) {
  cudaEvent_t event = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return Event(event);
}

absl::StatusOr<Graph> CreateGraph() {
  cudaGraph_t graph = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphCreate(&graph, 0));
  return Graph(graph);
}

absl::StatusOr<GraphExec> InstantiateGraph(cudaGraph_t graph, unsigned long long flags) {
  if (graph == nullptr) return absl::InvalidArgumentError("InstantiateGraph: graph is null");
  const NvtxRange range("InstantiateGraph");
  cudaGraphExec_t exec = nullptr;
  BATON_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&exec, graph, flags));
  return GraphExec(exec);
}

}  // namespace baton
