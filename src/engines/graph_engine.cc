#include "graph_engine.h"

#include "baton/status.h"
#include "engines/scheduler_nodes.h"
#include "foundation/nvtx.h"

namespace baton::detail {

absl::Status GraphEngine::EnqueueSteps(const StepProgram& program, const EngineSetup& setup,
                                       const GraphEngineParams* params, std::uint32_t bucket,
                                       std::uint32_t steps, cudaStream_t stream) {
  const StepContext context{program.buckets[bucket], setup.scheduler.args};
  BATON_RETURN_IF_ERROR(program.enqueue(context, stream));
  for (std::uint32_t k = 1; k < steps; ++k) {
    BATON_RETURN_IF_ERROR(CaptureTailInnerNode(params, stream, bucket));
    BATON_RETURN_IF_ERROR(program.enqueue(context, stream));
  }
  return absl::OkStatus();
}

absl::Status GraphEngine::Build(const StepProgram& program, const EngineSetup& setup) {
  const NvtxRange range(prepare_range_);
  BATON_ASSIGN_OR_RETURN(carried_, CarriedDecision::Create());
  BATON_ASSIGN_OR_RETURN(params_, DeviceBuffer<GraphEngineParams>::Create(1));
  BATON_ASSIGN_OR_RETURN(Stream capture, CreateStream());
  GraphEngineParams written;
  written.scheduler = setup.scheduler;
  written.carried = carried_.device_word();
  BATON_RETURN_IF_ERROR(BuildGraphs(program, setup, params_.data(), capture.get(), &written));
  BATON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(params_.data(), &written, sizeof(written), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

}  // namespace baton::detail
