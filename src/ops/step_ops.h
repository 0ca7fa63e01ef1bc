// The decoder step's op table: every op a plan may name, one line each. An
// op's kind (OpNode::kind) is its place in the list; the drivers
// (ops/host_driver.h, ops/device_driver.cuh) walk plans of these.
#pragma once

#include <cstdint>

#include "ops/all_reduce.h"
#include "ops/attention.h"
#include "ops/chunk_attention.h"
#include "ops/gemm.h"
#include "ops/gemv.h"
#include "ops/linear.h"
#include "ops/op.h"
#include "ops/rope_append.h"
#include "ops/row_norm.h"
#include "ops/select.h"
#include "ops/select_and_end.h"
#include "ops/silu_mul.h"
#include "ops/step_begin.h"
#include "ops/wide_gemv.h"

namespace baton::ops {

using StepOps = OpList<StepBegin,       // the batch's rows from the scheduler's StepArgs
                       RowNorm,         // embedding, residual add, RMSNorm
                       Gemv,            // Baton's GEMV with its fused inputs and outputs
                       WideGemv,        // Baton's GEMV for decode buckets of 9-64
                       Gemm,            // Baton's tensor-core GEMM (chunk steps)
                       Linear,          // a cuBLASLt projection (host only)
                       SiluMul,         // SiLU(gate) * up
                       RopeAppend,      // RoPE and the KV append of every row
                       Attention,       // decode attention, RoPE and the append fused or not
                       ChunkAttention,  // a chunk's causal attention (flash, tensor cores)
                       SelectAndEnd,    // token selection and the step's end
                       Select,          // token selection alone (not in a step's plan)
                       AllReduce>;      // tensor parallelism's sum or gather across the ranks

// An op's kind: its place in StepOps.
template <class Op>
inline constexpr std::uint32_t kKind = KindOf<Op, StepOps>::value;

// The node of a plan that runs `args` (over the step's sequences when
// `sequences`, else its rows).
template <class Args>
OpNode MakeNode(const Args& args, bool sequences = false) {
  using Op = typename Args::Op;
  OpNode node;
  node.kind = kKind<Op>;
  node.sequences = sequences;
  node.set<Op>(args);
  return node;
}

}  // namespace baton::ops
