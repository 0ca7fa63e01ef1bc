// Enqueues the scheduler node of each engine on a CAPTURING stream (the
// scheduler only ever runs inside a graph: device graph launches from a kernel
// outside a graph fail, docs/cuda-facts.md G2). Abseil-free; the host wraps it.
//
// The node gets a pointer to its parameters in device memory rather than the
// parameters themselves: they name the bucket table and conditional handles,
// which exist only after the graphs holding this node are built
// (engines/engine_params.h).
#pragma once

#include <cuda_runtime_api.h>

#include "engines/engine_params.h"

namespace baton::detail {

// Tail-launch engine: decide, then tail-launch the chosen bucket's graph (or
// report the exit). `after_inner`: the node ends a two-step graph and first
// launches a decision its inner scheduler carried.
[[nodiscard]] cudaError_t EnqueueTailLaunchScheduler(const GraphEngineParams* params,
                                                     cudaStream_t stream, bool after_inner = false);

// Between the steps of a multi-step bucket graph (tail-launch engine: [step;
// inner; step; ...; inner; step; tail scheduler]) or loop body (conditional
// engine, ending in its own scheduler node): decides the next
// step and lets the graph's next step run it when it stays in `body_bucket`.
// Otherwise it empties the next step's batch (its kernels then do nothing)
// and, for a step in another bucket, carries the decision to the tail
// scheduler (later inner nodes then leave their steps empty too).
[[nodiscard]] cudaError_t EnqueueTailInnerScheduler(const GraphEngineParams* params,
                                                    std::uint32_t body_bucket, cudaStream_t stream);

// Conditional engine: decide, then set the conditional handles its `role`
// owns (scheduler_params.h), or clear them and report the exit. `body_bucket`
// is the bucket whose body holds an inner (kInner) node.
// `after_inner`: the node ends a loop body with several steps (inner nodes
// between them, EnqueueTailInnerScheduler) and first honours a decision one of
// them carried to another bucket.
[[nodiscard]] cudaError_t EnqueueConditionalScheduler(const GraphEngineParams* params,
                                                      ConditionalRole role,
                                                      std::uint32_t body_bucket,
                                                      cudaStream_t stream,
                                                      bool after_inner = false);

}  // namespace baton::detail
