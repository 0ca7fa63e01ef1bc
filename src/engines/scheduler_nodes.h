// Capturing an engine's scheduler node (internal to the graph engines; tests use
// it to check the refusal below).
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "baton/engine.h"
#include "engines/engine_params.h"

namespace baton::detail {

// Enqueues `engine`'s scheduler node on `stream`, which must be capturing:
// the scheduler only ever runs inside a graph (a kernel that device-launches
// graphs fails with cudaErrorNotSupported outside one, docs/cuda-facts.md G2).
// FailedPrecondition, with nothing enqueued, when `stream` is not capturing.
// For the conditional engine, `role` and `body_bucket` say where the node sits.
// `after_inner` marks the last node of a multi-step bucket graph (tail-launch
// engine) or loop body (conditional engine): it first acts on a decision an
// inner node carried to another bucket.
[[nodiscard]] absl::Status CaptureSchedulerNode(Engine engine, const GraphEngineParams* params,
                                                cudaStream_t stream,
                                                ConditionalRole role = ConditionalRole::kLoop,
                                                std::uint32_t body_bucket = 0,
                                                bool after_inner = false);

// The node between two steps of bucket `body_bucket`'s graph or loop body
// (scheduler_launch.h). Same capture rule.
[[nodiscard]] absl::Status CaptureTailInnerNode(const GraphEngineParams* params,
                                                cudaStream_t stream, std::uint32_t body_bucket);

}  // namespace baton::detail
