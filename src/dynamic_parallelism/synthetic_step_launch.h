// The synthetic step's graph-engine copy (compiled without -rdc, into
// baton_runtime). Abseil-free; synthetic_step.cc wraps it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/step_args.h"
#include "baton/synthetic_step_params.h"

namespace baton::detail {

// Enqueues the step's K kernels on `stream` (a capturing stream), sized for
// `bucket_size`, each launched with programmatic dependent launch.
[[nodiscard]] cudaError_t EnqueueSyntheticStep(const StepArgs& args,
                                               const SyntheticStepParams& params,
                                               std::uint32_t bucket_size, cudaStream_t stream);

}  // namespace baton::detail
