// What the two graph engines (tail-launch, conditional) share. Their
// scheduler nodes are captured with a POINTER to GraphEngineParams, written
// only once the graphs those parameters name exist (engines/engine_params.h),
// and a graph or loop body of several steps carries a decision between them
// (engines/carried_decision.h). Private to the engines.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "baton/cuda_resources.h"
#include "carried_decision.h"
#include "engines/engine_driver.h"
#include "engines/engine_params.h"

namespace baton::detail {

class GraphEngine : public EngineDriver {
 public:
  [[nodiscard]] absl::Status Reset() final { return carried_.Reset(); }

 protected:
  // `prepare_range` names Prepare's NVTX range.
  explicit GraphEngine(const char* prepare_range) : prepare_range_(prepare_range) {}

  // `steps` steps of bucket `bucket` on capturing `stream` with an inner
  // scheduler node between each two: the steps of one bucket graph
  // (tail-launch) or loop body (conditional) before its last scheduler node.
  [[nodiscard]] static absl::Status EnqueueSteps(const StepProgram& program,
                                                 const EngineSetup& setup,
                                                 const GraphEngineParams* params,
                                                 std::uint32_t bucket, std::uint32_t steps,
                                                 cudaStream_t stream);

 private:
  // Captures the engine's graphs on `capture`, with scheduler nodes that read
  // `params` (written after this returns), and sets in `written` what those
  // nodes must know of the graphs: the bucket table and (conditional engine)
  // the conditional handles. `written` holds the runtime's scheduler
  // parameters and the carried word already.
  [[nodiscard]] virtual absl::Status BuildGraphs(const StepProgram& program,
                                                 const EngineSetup& setup,
                                                 const GraphEngineParams* params,
                                                 cudaStream_t capture,
                                                 GraphEngineParams* written) = 0;
  [[nodiscard]] absl::Status Build(const StepProgram& program, const EngineSetup& setup) final;

  const char* prepare_range_;
  CarriedDecision carried_;
  DeviceBuffer<GraphEngineParams> params_;
};

}  // namespace baton::detail
