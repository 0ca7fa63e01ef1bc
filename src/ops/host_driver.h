// The host's driver over the op table: an op's launch from the host (a
// stream, usually one being captured into a bucket's graph), with
// programmatic dependent launch (baton/step_kernel.cuh) and the op's cluster
// set at launch. One generic launch for every op: the op's check(), its
// select() of variant and launch shape, the shared-memory opt-in, the
// launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "ops/step_ops.h"
#if !defined(__CUDACC__)
#include "absl/status/status.h"
#endif

namespace baton::ops {

// Enqueues one kernel op, `node.kind` of StepOps, with the arguments the
// node holds as they are (no binding): the op's refusal
// (cudaErrorInvalidValue, before any launch), cudaSuccess without a launch
// for an empty grid (capacity 0), else the launch's error;
// cudaErrorNotSupported for a host-only op.
[[nodiscard]] cudaError_t EnqueueNode(const OpNode& node, cudaStream_t stream);

// Enqueues one op from its arguments (their type names the op), e.g.
// ops::Enqueue(ops::RowNorm::rms_norm(config, hidden, weight, batch, out), stream).
template <class Args>
[[nodiscard]] cudaError_t Enqueue(const Args& args, cudaStream_t stream) {
  return EnqueueNode(MakeNode(args), stream);
}

#if !defined(__CUDACC__)
// Binds each of `nodes` (a plan) to `frame` and enqueues it on `stream`, in
// order: kernel ops through EnqueueNode, host-only ones (cuBLASLt) through
// their own call. The first refusal stops the walk and names the op and its
// place in the plan.
[[nodiscard]] absl::Status EnqueueNodes(const OpNode* nodes, std::size_t count,
                                        const OpFrame& frame, cudaStream_t stream);
#endif

}  // namespace baton::ops
