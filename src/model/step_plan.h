// The decoder's step as a plan: a list of ops with their fusions, built once
// on the host from the config (PlanDecoderStep) and walked by both launch
// paths: the graph path captures it per bucket (step_launch.cc), the
// dynamic-parallelism step launches it from the device
// (dp_decoder_step.cu). The architecture's order is written here once; a new
// architecture is a change to PlanDecoderStep. Internal to the model;
// plain data, copied to device memory as it is.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/decoder_config.h"
#include "kernels/decode_kernels.h"
#include "kernels/gemv_io.h"
#include "model_tensors.h"

namespace baton::detail {

enum class StepOpKind : std::uint32_t {
  kStepBegin = 0,  // the batch's inputs from the scheduler's StepArgs (decoder_step.h)
  kRowNorm = 1,    // normed = RMSNorm(row_input) * norm, a row kernel
  kGemv = 2,       // Baton's GEMV with its fused input and output (kernels/gemv_io.h)
  kLinear = 3,     // cuBLASLt: y = x · Wᵀ (+ bias), projection `linear` of the bucket's plans
  kRopeAttention = 4,   // RoPE, KV append and attention over the cache, a block per row and head
  kSiluMul = 5,         // SiLU(gate) * up (io.x) into io.y, a row kernel
  kSelectAndEnd = 6,    // token selection with the step's end (decoder_step.h)
  kGemm = 7,            // Baton's tensor-core GEMM: y = x · Wᵀ (+ bias) (kernels/gemm.h)
  kRopeAppend = 8,      // RoPE and KV append of every row
  kChunkAttention = 9,  // attention of each sequence's chunk, after kRopeAppend (flash)
  kRowAttention = 10,   // attention a block per row and head, after kRopeAppend
  kWideGemv = 11,       // Baton's wide GEMV (kernels/wide_gemv.h): io.x plain, kGemv's outputs
};

// How a plan's attention runs. A step of a few rows (a decode bucket) fuses
// RoPE, the KV append and attention into one kernel per row and head; a step
// of long chunks appends every row first and then runs the chunk attention
// on tensor cores (or, for head sizes it does not take, the per-row kernel
// reading every key from the cache).
enum class AttentionPlan : std::uint32_t {
  kFusedRows = 0,
  kAppendThenChunks = 1,
  kAppendThenRows = 2
};

// What a row norm reads: the residual stream, embedding rows (which it stores
// as the stream) or the stream plus a delta (which it adds first).
enum class RowNormInput : std::uint32_t { kHidden = 0, kEmbedding = 1, kResidual = 2 };

// The cuBLASLt projections a bucket plans (kLinear's `linear`).
enum class Projection : std::uint32_t { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3, kLmHead = 4 };
inline constexpr int kProjections = 5;

struct StepOp {
  StepOpKind kind = StepOpKind::kStepBegin;
  // kRowNorm
  RowNormInput row_input = RowNormInput::kHidden;
  const void* row_source = nullptr;  // the embedding table (kEmbedding) or the delta (kResidual)
  const void* norm = nullptr;
  // kGemv, kLinear (kSiluMul: io.x and io.y)
  decode::GemvInput input = decode::GemvInput::kPlain;
  decode::GemvOutput output = decode::GemvOutput::kStore;
  Projection linear = Projection::kQkv;
  const void* w = nullptr;
  int out_features = 0;
  int in_features = 0;
  decode::GemvIo io;  // kGemv's reads and writes; kLinear: x, y and bias
  // kRopeAttention, kRowAttention (and the cache of kRopeAppend, kChunkAttention)
  KvCacheLayer cache;
  AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead;
  // How the kernel meets the one before it (kernels/decode_kernels.h,
  // DecodeBatch): its settled data is final when it starts; it lets the next
  // kernel launch before its own wait.
  bool settled = false;
  bool launch_next_early = false;
  // Runs over the step's sequences (positions) rather than its rows: the
  // logits' norm and projection (each sequence's last row) and selection.
  bool sequences = false;
};

// The activations a step writes, by row (device pointers); the logits by
// batch position.
struct StepBuffers {
  float* hidden = nullptr;  // the fp32 residual stream [max_rows, d_model]
  void* normed = nullptr;   // a row norm's output [max_rows, d_model]
  void* qkv = nullptr;
  void* attention = nullptr;
  void* projected = nullptr;  // a cuBLASLt projection's output before its residual add
  void* gate_up = nullptr;
  void* ffn_act = nullptr;
  void* logits = nullptr;
  const std::int32_t* in_tokens = nullptr;
  AttentionScratch attention_scratch;  // the split decode attention's partials
};

enum class PlanPath : std::uint32_t {
  kGemv = 0,       // Baton's GEMV, norms and residual adds fused in (batch invariant)
  kCublasLt = 1,   // cuBLASLt projections, row kernels around them (graph path only)
  kBatonGemm = 2,  // Baton's tensor-core GEMM in cuBLASLt's place (row invariant; every engine)
  kWideGemv = 3,   // Baton's wide GEMV for kAuto's middle buckets (graph path only)
};

// The step for `config`: step begin, then per layer the attention block
// (norm, QKV projection with its bias, RoPE + attention, output projection
// with its bias, residual add) and the FFN block (norm, gate | up
// projection, SiLU(gate) * up, down projection, residual add), then the final
// norm and the LM head of each sequence's last row and token selection,
// lowered for `path` with `attention`.
[[nodiscard]] std::vector<StepOp> PlanDecoderStep(const DecoderConfig& config,
                                                  const ModelTensors& weights,
                                                  const std::vector<KvCacheLayer>& caches,
                                                  const StepBuffers& buffers, PlanPath path,
                                                  AttentionPlan attention);

// The attention a bucket of `rows` rows runs: fused rows up to max_batch
// (decode steps, short chunks), appended chunks above (chunk attention where
// the head size allows it). A function of the shapes alone, so every engine
// makes the same choice for a bucket.
[[nodiscard]] AttentionPlan AttentionFor(const DecoderConfig& config, std::uint32_t rows,
                                         std::uint32_t max_batch);

}  // namespace baton::detail
