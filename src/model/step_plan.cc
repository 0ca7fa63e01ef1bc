#include "step_plan.h"

#include <cstddef>

#include "decoder_step.h"

namespace baton::detail {
namespace {

using decode::GemvInput;
using decode::GemvIo;
using decode::GemvOutput;

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

std::vector<LogicalOp> Architecture(const DecoderConfig& c, const ModelTensors& w) {
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
                 c.padded_vocab(), c.d_model});
  return ops;
}

// Where a projection stores its output (when no residual add takes it).
void* OutputOf(Projection projection, const StepBuffers& b) {
  switch (projection) {
    case Projection::kQkv:
      return b.qkv;
    case Projection::kO:
    case Projection::kDown:
      return b.projected;
    case Projection::kGateUp:
      return b.gate_up;
    case Projection::kLmHead:
      return b.logits;
  }
  return nullptr;
}

class PlanBuilder {
 public:
  void Add(StepOp op) {
    op.settled = settled_;
    ops_.push_back(op);
  }
  // The norm of rows (or, `sequences`, of each sequence's last row).
  void RowNorm(RowNormInput input, const void* source, const void* norm, bool sequences = false) {
    StepOp op;
    op.kind = StepOpKind::kRowNorm;
    op.row_input = input;
    op.row_source = source;
    op.norm = norm;
    op.sequences = sequences;
    Add(op);
  }
  // RoPE, the KV append and attention of one layer.
  // `short_rows`: how the decode attention attends rows of one unit
  // (kernels/attention_split.h).
  void Attend(AttentionPlan attention, const KvCacheLayer& cache, AttentionShortRows short_rows) {
    if (attention == AttentionPlan::kFusedRows) {
      Simple(StepOpKind::kRopeAttention, cache, short_rows);
      return;
    }
    Simple(StepOpKind::kRopeAppend, cache);
    Simple(attention == AttentionPlan::kAppendThenChunks ? StepOpKind::kChunkAttention
                                                         : StepOpKind::kRowAttention,
           cache, short_rows);
  }
  void Simple(StepOpKind kind, const KvCacheLayer& cache = {},
              AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead) {
    StepOp op;
    op.kind = kind;
    op.cache = cache;
    op.short_rows = short_rows;
    Add(op);
  }
  // SiLU(gate) * up of `gate_up`'s rows into `out`, a row kernel.
  void SiluMul(const void* gate_up, void* out) {
    StepOp op;
    op.kind = StepOpKind::kSiluMul;
    op.io.x = gate_up;
    op.io.y = out;
    Add(op);
  }
  // From here on the batch is settled: step begin (which writes positions
  // and input tokens) is two or more nodes back and the scheduler (header,
  // slots) further, and the residual GEMVs are never adjacent.
  void Settle() { settled_ = true; }
  std::vector<StepOp> Take() { return std::move(ops_); }

 private:
  bool settled_ = false;
  std::vector<StepOp> ops_;
};

// Baton's GEMV, five kernels per layer (six where a norm stays a row kernel):
// every RMSNorm fused into the GEMV that reads it where GemvFusesRmsNorm
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
        plan.Attend(attention, caches[op.layer],
                    wide ? AttentionShortRows::kGrouped : AttentionShortRows::kPerQueryHead);
        input = b.attention;
        break;
      case Logical::kGate:
      case Logical::kAddResidual:
        break;  // taken by the projection before it
      case Logical::kProject: {
        const auto followed_by = [&](Logical kind) {
          return i + 1 < logical.size() && logical[i + 1].kind == kind;
        };
        const bool residual = followed_by(Logical::kAddResidual);
        const bool gate = followed_by(Logical::kGate);
        // The LM head and its norm see each sequence's last row only.
        const bool head = op.projection == Projection::kLmHead;
        StepOp gemv;
        gemv.kind = wide ? StepOpKind::kWideGemv : StepOpKind::kGemv;
        gemv.sequences = head;
        gemv.w = op.weight;
        gemv.out_features = op.out_features;
        gemv.in_features = op.in_features;
        gemv.launch_next_early = op.projection == Projection::kQkv && op.layer > 0;
        gemv.output = residual ? GemvOutput::kResidualAdd
                      : gate   ? GemvOutput::kSiluMul
                               : GemvOutput::kStore;
        void* y = residual ? nullptr : gate ? b.ffn_act : OutputOf(op.projection, b);
        if (norm != nullptr && !wide && GemvFusesRmsNorm(op.out_features, op.in_features)) {
          gemv.input = embed ? GemvInput::kEmbeddingRmsNorm : GemvInput::kRmsNorm;
          gemv.io = embed ? GemvIo::embedding_rms_norm(c, w.embedding, b.in_tokens, b.hidden, norm,
                                                       y, op.bias)
                          : GemvIo::rms_norm(c, b.hidden, norm, y, op.bias);
        } else {
          if (norm != nullptr) {
            plan.RowNorm(embed ? RowNormInput::kEmbedding : RowNormInput::kHidden,
                         embed ? w.embedding : nullptr, norm, head);
            input = b.normed;
          }
          gemv.input = GemvInput::kPlain;
          gemv.io = GemvIo::plain(input, y, op.bias);
        }
        if (residual) gemv.io.residual = b.hidden;
        plan.Add(gemv);
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
                      const StepBuffers& b, AttentionPlan attention, StepOpKind projection,
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
        residual = true;
        break;
      case Logical::kNorm:
        plan.RowNorm(embed      ? RowNormInput::kEmbedding
                     : residual ? RowNormInput::kResidual
                                : RowNormInput::kHidden,
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
        plan.Attend(attention, caches[op.layer],
                    projection == StepOpKind::kLinear ? AttentionShortRows::kGrouped
                                                      : AttentionShortRows::kPerQueryHead);
        input = b.attention;
        break;
      case Logical::kGate:
        plan.SiluMul(b.gate_up, b.ffn_act);
        input = b.ffn_act;
        break;
      case Logical::kProject: {
        StepOp linear;
        linear.kind = projection;
        linear.sequences = op.projection == Projection::kLmHead;
        linear.linear = op.projection;
        linear.w = op.weight;
        linear.out_features = op.out_features;
        linear.in_features = op.in_features;
        linear.io.x = input;
        linear.io.bias = op.bias;
        linear.io.y = OutputOf(op.projection, b);
        plan.Add(linear);
        input = linear.io.y;
        break;
      }
    }
  }
}

// The chunk attention's head sizes (kernels/chunk_attention.h): multiples of
// its 16-wide mma k step.
bool ChunkAttentionTakes(const DecoderConfig& config) {
  return config.head_dim % 16 == 0 && config.head_dim <= kDecoderMaxHeadDim;
}

}  // namespace

std::vector<StepOp> PlanDecoderStep(const DecoderConfig& config, const ModelTensors& weights,
                                    const std::vector<KvCacheLayer>& caches,
                                    const StepBuffers& buffers, PlanPath path,
                                    AttentionPlan attention) {
  const std::vector<LogicalOp> logical = Architecture(config, weights);
  PlanBuilder plan;
  plan.Simple(StepOpKind::kStepBegin);
  switch (path) {
    case PlanPath::kGemv:
    case PlanPath::kWideGemv:
      LowerForGemv(config, logical, weights, caches, buffers, attention,
                   path == PlanPath::kWideGemv, plan);
      break;
    case PlanPath::kCublasLt:
      LowerForCublasLt(config, logical, weights, caches, buffers, attention, StepOpKind::kLinear,
                       plan);
      break;
    case PlanPath::kBatonGemm:
      LowerForCublasLt(config, logical, weights, caches, buffers, attention, StepOpKind::kGemm,
                       plan);
      break;
  }
  plan.Settle();  // token selection is many nodes after step begin
  StepOp select;
  select.kind = StepOpKind::kSelectAndEnd;
  select.sequences = true;
  plan.Add(select);
  return plan.Take();
}

AttentionPlan AttentionFor(const DecoderConfig& config, std::uint32_t rows,
                           std::uint32_t max_batch) {
  if (!IsChunkStep(rows, max_batch)) return AttentionPlan::kFusedRows;
  return ChunkAttentionTakes(config) ? AttentionPlan::kAppendThenChunks
                                     : AttentionPlan::kAppendThenRows;
}

}  // namespace baton::detail
