// The graph path's walk over a step plan (step_plan.h): each op launched
// from the host on a (capturing) stream with the bucket's capacity, where
// the dynamic-parallelism step launches the same ops from the device
// (dp_decoder_step.cu). Internal to the model.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <vector>

#include "absl/status/status.h"
#include "baton/cublaslt_matmul.h"
#include "baton/step_args.h"
#include "decoder_step.h"
#include "step_plan.h"

namespace baton::detail {

struct PlanLaunch {
  const DecoderStepView* view = nullptr;  // config, request table, per-position state
  StepArgs args;
  std::uint32_t capacity = 0;  // the bucket's size
  const StepBuffers* buffers = nullptr;
  const float* rope_inv_freq = nullptr;
  // The bucket's cuBLASLt plans, by Projection (a kLinear op needs them).
  std::array<CublasLtLinear*, kProjections> linears{};
};

[[nodiscard]] absl::Status EnqueuePlan(const std::vector<StepOp>& plan, const PlanLaunch& launch,
                                       cudaStream_t stream);

}  // namespace baton::detail
