#include "step_launch.h"

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "kernels/gemm.h"
#include "kernels/wide_gemv.h"

namespace baton::detail {

absl::Status EnqueuePlan(const std::vector<StepOp>& plan, const PlanLaunch& launch,
                         cudaStream_t stream) {
  const DecoderStepView& view = *launch.view;
  const DecoderConfig& c = view.config;
  const StepBuffers& b = *launch.buffers;
  for (const StepOp& op : plan) {
    const DecodeBatch batch = StepOpBatch(view, launch.args, op, launch.rows, launch.sequences);
    switch (op.kind) {
      case StepOpKind::kStepBegin:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueStepBegin(view, launch.args, launch.sequences, stream));
        break;
      case StepOpKind::kRowNorm:
        switch (op.row_input) {
          case RowNormInput::kHidden:
            BATON_CUDA_RETURN_IF_ERROR(
                EnqueueRmsNorm(c, b.hidden, op.norm, batch, b.normed, stream));
            break;
          case RowNormInput::kEmbedding:
            BATON_CUDA_RETURN_IF_ERROR(EnqueueEmbeddingRmsNorm(
                c, op.row_source, b.in_tokens, op.norm, batch, b.hidden, b.normed, stream));
            break;
          case RowNormInput::kResidual:
            BATON_CUDA_RETURN_IF_ERROR(EnqueueResidualAddRmsNorm(c, b.hidden, op.row_source,
                                                                 op.norm, batch, b.normed, stream));
            break;
        }
        break;
      case StepOpKind::kGemv:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueGemvFused(c.dtype, op.input, op.output, op.w,
                                                    op.out_features, op.in_features, op.io, batch,
                                                    stream));
        break;
      case StepOpKind::kWideGemv:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueWideGemv(c.dtype, op.output, op.w, op.out_features,
                                                   op.in_features, op.io, batch, stream));
        break;
      case StepOpKind::kLinear: {
        CublasLtLinear* linear = launch.linears[static_cast<int>(op.linear)];
        if (linear == nullptr) {
          return absl::InternalError(
              absl::StrCat("step plan: projection ", static_cast<int>(op.linear),
                           " has no cuBLASLt plan for bucket ", launch.rows));
        }
        BATON_RETURN_IF_ERROR(linear->Enqueue(stream, op.io.x, op.w, op.io.bias, op.io.y));
        break;
      }
      case StepOpKind::kGemm:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueGemm(c.dtype, decode::GemvOutput::kStore, op.w,
                                               op.out_features, op.in_features, op.io, batch,
                                               stream));
        break;
      case StepOpKind::kRopeAttention:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueRopeAttention(c, launch.rope_inv_freq, b.qkv, op.cache,
                                                        batch, b.attention_scratch, b.attention,
                                                        stream, op.short_rows));
        break;
      case StepOpKind::kRopeAppend:
        BATON_CUDA_RETURN_IF_ERROR(
            EnqueueRopeAppendKv(c, launch.rope_inv_freq, b.qkv, op.cache, batch, stream));
        break;
      case StepOpKind::kChunkAttention:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueChunkAttention(
            c, b.qkv, op.cache, StepChunks(view, launch.args, op, launch.rows, launch.sequences),
            b.attention, stream));
        break;
      case StepOpKind::kRowAttention:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueDecodeAttention(
            c, b.qkv, op.cache, batch, b.attention_scratch, b.attention, stream, op.short_rows));
        break;
      case StepOpKind::kSiluMul:
        BATON_CUDA_RETURN_IF_ERROR(EnqueueSiluMul(c, op.io.x, batch, op.io.y, stream));
        break;
      case StepOpKind::kSelectAndEnd:
        BATON_CUDA_RETURN_IF_ERROR(
            EnqueueSelectAndEndStep(view, launch.args, b.logits, batch, stream));
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::detail
