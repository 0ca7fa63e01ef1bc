#include "plan/step_plan.h"

#include <cstddef>

#include "kernels/gemv_shape.h"
#include "ops/step_ops.h"

namespace baton::detail {
namespace {

using decode::gemv_fuses_norm;
using decode::GemvInput;
using decode::GemvIo;
using decode::GemvOutput;
using ops::Projection;

// The architecture, before any fusion: what a Llama-family decoder step
// computes, in order. Written once; PlanDecoderStep lowers it for a path.
enum class Logical {
  kEmbed,        // hidden = embedding[token]
  kNorm,         // RMSNorm(hidden) * weight
  kProject,      // y = W · x + bias (one of Projection)
  kAttend,       // RoPE, KV append, attention over the cache
  kGate,         // SiLU(gate) * up of the gate | up projection
  kAddResidual,  // hidden += the projection just made
};

struct LogicalOp {
  Logical kind;
  int layer = 0;
  Projection projection = Projection::kQkv;
  const void* weight = nullptr;  // the norm's or the projection's
  const void* bias = nullptr;
  int out_features = 0;
  int in_features = 0;
};

std::vector<LogicalOp> Architecture(const DecoderConfig& c, const ModelTensors& w,
                                    const TensorParallelStep* tp) {
  std::vector<LogicalOp> ops;
  ops.push_back({Logical::kEmbed});
  for (int l = 0; l < c.layers; ++l) {
    const LayerTensors& t = w.layers[l];
    ops.push_back({Logical::kNorm, l, {}, t.attn_norm});
    ops.push_back(
        {Logical::kProject, l, Projection::kQkv, t.wqkv, t.qkv_bias, c.qkv_width(), c.d_model});
    ops.push_back({Logical::kAttend, l});
    ops.push_back(
        {Logical::kProject, l, Projection::kO, t.wo, t.o_bias, c.d_model, c.attention_width()});
    ops.push_back({Logical::kAddResidual, l});
    ops.push_back({Logical::kNorm, l, {}, t.ffn_norm});
    ops.push_back({Logical::kProject, l, Projection::kGateUp, t.w_gate_up, nullptr,
                   c.gate_up_width(), c.d_model});
    ops.push_back({Logical::kGate, l});
    ops.push_back({Logical::kProject, l, Projection::kDown, t.w_down, nullptr, c.d_model, c.ffn});
    ops.push_back({Logical::kAddResidual, l});
  }
  ops.push_back({Logical::kNorm, c.layers, {}, w.final_norm});
  ops.push_back({Logical::kProject, c.layers, Projection::kLmHead, w.lm_head, nullptr,
                 tp != nullptr ? tp->vocab_rows : c.padded_vocab(), c.d_model});
  return ops;
}

// Where a projection stores its output (when no residual add takes it): a
// tensor-parallel rank's LM head, its slice of the logits.
void* OutputOf(Projection projection, const StepBuffers& b, const TensorParallelStep* tp) {
  switch (projection) {
    case Projection::kQkv:
      return b.qkv;
    case Projection::kO:
    case Projection::kDown:
      return b.projected;
    case Projection::kGateUp:
      return b.gate_up;
    case Projection::kLmHead:
      return tp != nullptr ? tp->logits_part : b.logits;
  }
  return nullptr;
}

// Builds a plan's nodes in order, each with the step's per-row state.
class PlanBuilder {
 public:
  PlanBuilder(const DecoderConfig& config, const DecoderStepView& view, const StepBuffers& buffers,
              const float* rope_inv_freq, const TensorParallelStep* tp)
      : c_(config), view_(view), b_(buffers), rope_(rope_inv_freq), tp_(tp) {}

  const DecoderConfig& config() const { return c_; }
  const StepBuffers& buffers() const { return b_; }
  const TensorParallelStep* tp() const { return tp_; }

  // The batch of a node over the step's rows, or (`sequences`) over its
  // positions, each reading its last row; how it meets the node before it
  // (kernels/decode_batch.h): settled once Settle() has run.
  DecodeBatch Batch(bool sequences, bool launch_next_early = false) const {
    DecodeBatch batch;
    if (sequences) {
      batch.rows = view_.logit_rows;
    } else {
      batch.fresh = view_.row_fresh;
    }
    batch.slots = view_.row_slots;
    batch.positions = view_.row_positions;
    batch.max_slots = view_.max_batch;
    batch.settled = settled_;
    batch.launch_next_early = launch_next_early;
    return batch;
  }
  template <class Args>
  void Add(const Args& args, bool sequences = false) {
    nodes_.push_back(ops::MakeNode(args, sequences));
  }
  void StepBegin() { Add(ops::StepBegin::Args{{view_, {}}, 0}, /*sequences=*/true); }
  void SelectAndEnd() {
    Add(ops::SelectAndEnd::Args{{view_, {}}, b_.logits, Batch(true)}, /*sequences=*/true);
  }
  // The norm of rows (or, `sequences`, of each sequence's last row): of the
  // residual stream, of embedding rows (stored as the stream) or of the
  // stream plus a delta (added first).
  void RowNorm(ops::RowNorm::Source input, const void* source, const void* norm,
               bool sequences = false) {
    using Source = ops::RowNorm::Source;
    const DecodeBatch batch = Batch(sequences);
    switch (input) {
      case Source::kHidden:
        Add(ops::RowNorm::rms_norm(c_, b_.hidden, norm, batch, b_.normed), sequences);
        break;
      case Source::kEmbedding:
        Add(ops::RowNorm::embedding_rms_norm(c_, source, b_.in_tokens, norm, batch, b_.hidden,
                                             b_.normed),
            sequences);
        break;
      case Source::kResidual:
        Add(ops::RowNorm::residual_add_rms_norm(c_, b_.hidden, source, norm, batch, b_.normed),
            sequences);
        break;
    }
  }
  // RoPE, the KV append and attention of one layer; returns its output (the
  // next projection's input). `short_rows`: how the decode attention attends
  // rows of one unit (kernels/attention/attention_split.h).
  const void* Attend(AttentionPlan attention, const KvCacheLayer& cache,
                     AttentionShortRows short_rows) {
    if (attention == AttentionPlan::kFusedRows) {
      Add(ops::Attention::with_rope(c_, rope_, b_.qkv, cache, Batch(false), b_.attention_scratch,
                                    b_.attention, short_rows));
      return b_.attention;
    }
    Add(ops::RopeAppend::of(c_, rope_, b_.qkv, cache, Batch(false)));
    if (attention == AttentionPlan::kAppendThenChunks) {
      ChunkAttentionBatch chunks;  // the launch binds the step's sequences
      chunks.start = view_.chunk_start;
      chunks.max_slots = view_.max_batch;
      Add(ops::ChunkAttention::of(c_, b_.qkv, cache, chunks, b_.attention));
    } else {
      Add(ops::Attention::decode(c_, b_.qkv, cache, Batch(false), b_.attention_scratch,
                                 b_.attention, short_rows));
    }
    return b_.attention;
  }
  // SiLU(gate) * up of `gate_up`'s rows into `out`, a row kernel.
  void SiluMul(const void* gate_up, void* out) {
    Add(ops::SiluMul::of(c_, gate_up, Batch(false), out));
  }
  // Tensor parallelism: the ranks' partial sums of a row projection (in
  // b.projected) added into the residual stream, or (`in_place`) summed in
  // b.projected for the residual norm after it.
  void ReduceRows(bool in_place) {
    const ops::AllReduce::Args args =
        in_place ? ops::AllReduce::sum(tp_->view, c_.dtype, c_.d_model, b_.projected,
                                       b_.projected, Batch(false))
                 : ops::AllReduce::add_to_residual(tp_->view, c_.dtype, c_.d_model, b_.projected,
                                                   b_.hidden, Batch(false));
    Add(args);
  }
  // Tensor parallelism: every rank's slice of each sequence's logits, side
  // by side in b.logits (the whole vocabulary's rows, as selection reads them).
  void GatherLogits() {
    Add(ops::AllReduce::gather(tp_->view, c_.dtype, static_cast<std::uint32_t>(tp_->vocab_rows),
                               tp_->logits_part, b_.logits, Batch(true)),
        /*sequences=*/true);
  }
  // From here on the batch is settled: step begin (which writes positions
  // and input tokens) is two or more nodes back and the scheduler (header,
  // slots) further, and the residual GEMVs are never adjacent.
  void Settle() { settled_ = true; }
  std::vector<ops::OpNode> Take() { return std::move(nodes_); }

 private:
  const DecoderConfig& c_;
  const DecoderStepView& view_;
  const StepBuffers& b_;
  const float* rope_;
  const TensorParallelStep* tp_;
  bool settled_ = false;
  std::vector<ops::OpNode> nodes_;
};

// Baton's GEMV, five kernels per layer (six where a norm stays a row kernel):
// every RMSNorm fused into the GEMV that reads it where gemv_fuses_norm
// allows (a function of the shape alone; the first one with the embedding),
// SiLU(gate) * up into the gate | up GEMV's output (GemvOutput::kSiluMul: each
// activation made once, by the block that holds its gate and up sums), every
// residual add into the GEMV that produces its delta. SiLU * up used to be
// the down GEMV's input where its row blocks' recomputation stayed small and
// a row kernel elsewhere: H200, Llama-3.2-1B at b1, the input form streamed
// the down weights at 41% of the read bandwidth (128 row blocks x 8192
// evaluations per position; results/h200-2026-11-23-silu-unfused.json), and
// the row kernel cost a node per layer. The QKV projections of layers >= 1 let
// attention launch before their wait (DecodeBatch::launch_next_early):
// attention's loads before its own wait (the batch, the KV-cache history)
// are final by then (H200, tiny model b1: 35.7 -> 34.6 us per step). Not the
// first layer's (step begin, just before, writes the positions attention
// reads early); early launches after the O, down and logits projections
// measured no gain, and one after the down projection cost 1 us.
//
// `wide`: the wide GEMV's plan (kAuto's buckets above auto_gemv_max_bucket, whose
// tokens already depend on the bucket): the same outputs fused, every norm a
// row kernel (the wide GEMV reads plain inputs: each of its blocks owns
// every position, so a fused norm would recompute every position's scale
// per row block), and attention grouped per key/value head as on the
// cuBLASLt plan.
void LowerForGemv(const DecoderConfig& c, const std::vector<LogicalOp>& logical,
                  const ModelTensors& w, const std::vector<KvCacheLayer>& caches,
                  const StepBuffers& b, AttentionPlan attention, bool wide, PlanBuilder& plan) {
  bool embed = false;           // the embedding is pending (fused into the next norm)
  const void* norm = nullptr;   // a pending norm (fused into the next projection)
  const void* input = nullptr;  // the next projection's plain input
  for (std::size_t i = 0; i < logical.size(); ++i) {
    const LogicalOp& op = logical[i];
    switch (op.kind) {
      case Logical::kEmbed:
        embed = true;
        break;
      case Logical::kNorm:
        norm = op.weight;
        break;
      case Logical::kAttend:
        input =
            plan.Attend(attention, caches[op.layer],
                        wide ? AttentionShortRows::kGrouped : AttentionShortRows::kPerQueryHead);
        break;
      case Logical::kGate:
      case Logical::kAddResidual:
        break;  // taken by the projection before it
      case Logical::kProject: {
        const auto followed_by = [&](Logical kind) {
          return i + 1 < logical.size() && logical[i + 1].kind == kind;
        };
        // A tensor-parallel rank's residual projections store partial sums,
        // which an all-reduce then adds into the residual stream.
        const bool reduce = plan.tp() != nullptr && followed_by(Logical::kAddResidual);
        const bool residual = !reduce && followed_by(Logical::kAddResidual);
        const bool gate = followed_by(Logical::kGate);
        // The LM head and its norm see each sequence's last row only.
        const bool head = op.projection == Projection::kLmHead;
        const GemvOutput output = residual ? GemvOutput::kResidualAdd
                                  : gate   ? GemvOutput::kSiluMul
                                           : GemvOutput::kStore;
        void* y = residual ? nullptr : gate ? b.ffn_act : OutputOf(op.projection, b, plan.tp());
        GemvInput in = GemvInput::kPlain;
        GemvIo io;
        if (norm != nullptr && !wide && gemv_fuses_norm(op.out_features, op.in_features)) {
          in = embed ? GemvInput::kEmbeddingRmsNorm : GemvInput::kRmsNorm;
          io = embed ? GemvIo::embedding_rms_norm(c, w.embedding, b.in_tokens, b.hidden, norm, y,
                                                  op.bias)
                     : GemvIo::rms_norm(c, b.hidden, norm, y, op.bias);
        } else {
          if (norm != nullptr) {
            plan.RowNorm(embed ? ops::RowNorm::Source::kEmbedding : ops::RowNorm::Source::kHidden,
                         embed ? w.embedding : nullptr, norm, head);
            input = b.normed;
          }
          io = GemvIo::plain(input, y, op.bias);
        }
        if (residual) io.residual = b.hidden;
        const DecodeBatch batch =
            plan.Batch(head, op.projection == Projection::kQkv && op.layer > 0);
        if (wide) {
          plan.Add(ops::WideGemv::of(c.dtype, output, op.weight, op.out_features, op.in_features,
                                     io, batch),
                   head);
        } else {
          plan.Add(ops::Gemv::fused(c.dtype, in, output, op.weight, op.out_features, op.in_features,
                                    io, batch),
                   head);
        }
        if (reduce) plan.ReduceRows(/*in_place=*/false);
        if (head && plan.tp() != nullptr) plan.GatherLogits();
        if (embed) plan.Settle();
        embed = false;
        norm = nullptr;
        input = y;
        break;
      }
    }
  }
}

// cuBLASLt plans take no prologue or residual epilogue: every residual add
// is fused with the norm that follows it (the next layer's attention norm,
// or the final norm) into one row kernel, the embedding with the first
// norm, RoPE with attention; SiLU(gate) * up is a row kernel of its own.
void LowerForCublasLt(const DecoderConfig& c, const std::vector<LogicalOp>& logical,
                      const ModelTensors& w, const std::vector<KvCacheLayer>& caches,
                      const StepBuffers& b, AttentionPlan attention, bool cublas,
                      PlanBuilder& plan) {
  bool embed = false;
  bool residual = false;  // a residual add is pending (fused into the next norm)
  const void* input = nullptr;
  for (const LogicalOp& op : logical) {
    switch (op.kind) {
      case Logical::kEmbed:
        embed = true;
        break;
      case Logical::kAddResidual:
        // A tensor-parallel rank's projection made a partial sum: the ranks'
        // sum first, which the residual norm then adds.
        if (plan.tp() != nullptr) plan.ReduceRows(/*in_place=*/true);
        residual = true;
        break;
      case Logical::kNorm:
        plan.RowNorm(embed      ? ops::RowNorm::Source::kEmbedding
                     : residual ? ops::RowNorm::Source::kResidual
                                : ops::RowNorm::Source::kHidden,
                     embed      ? w.embedding
                     : residual ? b.projected
                                : nullptr,
                     op.weight, /*sequences=*/op.layer == c.layers);
        if (embed) plan.Settle();
        embed = residual = false;
        input = b.normed;
        break;
      case Logical::kAttend:
        // Bits that already depend on the bucket (cuBLASLt) read each
        // key once per group; Baton's GEMM keeps the GEMV's attention.
        input =
            plan.Attend(attention, caches[op.layer],
                        cublas ? AttentionShortRows::kGrouped : AttentionShortRows::kPerQueryHead);
        break;
      case Logical::kGate:
        plan.SiluMul(b.gate_up, b.ffn_act);
        input = b.ffn_act;
        break;
      case Logical::kProject: {
        const bool head = op.projection == Projection::kLmHead;
        void* y = OutputOf(op.projection, b, plan.tp());
        if (cublas) {
          plan.Add(ops::Linear::Args{op.projection, input, op.weight, op.bias, y}, head);
        } else {
          plan.Add(
              ops::Gemm::of(c.dtype, GemvOutput::kStore, op.weight, op.out_features, op.in_features,
                            GemvIo::plain(input, y, op.bias), plan.Batch(head)),
              head);
        }
        if (plan.tp() != nullptr && head) plan.GatherLogits();
        input = y;
        break;
      }
    }
  }
}

// The chunk attention's head sizes (ops/chunk_attention.h): multiples of
// its 16-wide mma k step.
bool ChunkAttentionTakes(const DecoderConfig& config) {
  return config.head_dim % 16 == 0 && config.head_dim <= kDecoderMaxHeadDim;
}

}  // namespace

std::vector<ops::OpNode> PlanDecoderStep(const DecoderConfig& config, const ModelTensors& weights,
                                         const std::vector<KvCacheLayer>& caches,
                                         const StepBuffers& buffers, const DecoderStepView& view,
                                         PlanPath path, AttentionPlan attention,
                                         const TensorParallelStep* tp) {
  const std::vector<LogicalOp> logical = Architecture(config, weights, tp);
  PlanBuilder plan(config, view, buffers, weights.rope_inv_freq, tp);
  plan.StepBegin();
  switch (path) {
    case PlanPath::kGemv:
    case PlanPath::kWideGemv:
      LowerForGemv(config, logical, weights, caches, buffers, attention,
                   path == PlanPath::kWideGemv, plan);
      break;
    case PlanPath::kCublasLt:
    case PlanPath::kBatonGemm:
      LowerForCublasLt(config, logical, weights, caches, buffers, attention,
                       path == PlanPath::kCublasLt, plan);
      break;
  }
  plan.Settle();  // token selection is many nodes after step begin
  plan.SelectAndEnd();
  return plan.Take();
}

AttentionPlan AttentionFor(const DecoderConfig& config, std::uint32_t rows,
                           std::uint32_t max_batch) {
  if (!IsChunkStep(rows, max_batch)) return AttentionPlan::kFusedRows;
  return ChunkAttentionTakes(config) ? AttentionPlan::kAppendThenChunks
                                     : AttentionPlan::kAppendThenRows;
}

}  // namespace baton::detail
