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
#include "kernels/chunk_attention.h"
#include "step_plan.h"

namespace baton::detail {

struct PlanLaunch {
  const DecoderStepView* view = nullptr;  // config, request table, per-row and per-position state
  StepArgs args;
  std::uint32_t rows = 0;       // the bucket: rows the layer kernels cover
  std::uint32_t sequences = 0;  // positions the logits and selection cover: min(rows, max_batch)
  const StepBuffers* buffers = nullptr;
  const float* rope_inv_freq = nullptr;
  // The bucket's cuBLASLt plans, by Projection (a kLinear op needs them).
  std::array<CublasLtLinear*, kProjections> linears{};
};

// The DecodeBatch of an op of `view`'s step: over the step's rows, or (an op
// over sequences) over its positions, each reading its last row. For the
// graph path and the dynamic-parallelism step alike.
[[nodiscard]] BATON_HOST_DEVICE inline DecodeBatch StepOpBatch(const DecoderStepView& view,
                                                               const StepArgs& args,
                                                               const StepOp& op, std::uint32_t rows,
                                                               std::uint32_t sequences) {
  DecodeBatch batch;
  if (op.sequences) {
    batch.active = &args.header->batch;
    batch.capacity = sequences;
    batch.rows = view.logit_rows;
  } else {
    batch.active = &args.header->tokens;
    batch.capacity = rows;
    batch.fresh = view.row_fresh;
  }
  batch.slots = view.row_slots;
  batch.positions = view.row_positions;
  batch.max_slots = view.max_batch;
  batch.settled = op.settled;
  batch.launch_next_early = op.launch_next_early;
  return batch;
}

// The chunk attention's view of the step's sequences (kernels/chunk_attention.h).
[[nodiscard]] BATON_HOST_DEVICE inline ChunkAttentionBatch StepChunks(const DecoderStepView& view,
                                                                      const StepArgs& args,
                                                                      const StepOp& op,
                                                                      std::uint32_t rows,
                                                                      std::uint32_t sequences) {
  ChunkAttentionBatch chunks;
  chunks.active = &args.header->batch;
  chunks.capacity = sequences;
  chunks.rows = rows;
  chunks.tokens = args.tokens;
  chunks.first_row = args.token_offsets;
  chunks.slots = args.slots;
  chunks.start = view.chunk_start;
  chunks.max_slots = view.max_batch;
  chunks.launch_next_early = op.launch_next_early;
  return chunks;
}

[[nodiscard]] absl::Status EnqueuePlan(const std::vector<StepOp>& plan, const PlanLaunch& launch,
                                       cudaStream_t stream);

}  // namespace baton::detail
