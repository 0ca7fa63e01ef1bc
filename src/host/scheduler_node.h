// Capturing an engine's scheduler node (internal to the runtime; tests use it
// to check the refusal below).
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "baton/engine.h"
#include "scheduler_params.h"

namespace baton::detail {

// Enqueues `engine`'s scheduler node on `stream`, which must be capturing:
// the scheduler only ever runs inside a graph (a kernel that device-launches
// graphs fails with cudaErrorNotSupported outside one, ../shared/DESIGN.md).
// FailedPrecondition, with nothing enqueued, when `stream` is not capturing.
// For the conditional engine, `role` and `body_bucket` say where the node sits.
[[nodiscard]] absl::Status CaptureSchedulerNode(Engine engine, const SchedulerParams* params,
                                                cudaStream_t stream,
                                                ConditionalRole role = ConditionalRole::kLoop,
                                                std::uint32_t body_bucket = 0);

}  // namespace baton::detail
