// The decoder's step as a plan: a list of the op table's nodes (src/ops) with
// their fusions, built once on the host from the config (PlanDecoderStep)
// and walked by every launch path: the graph engines capture it per bucket
// (ops/host_driver.h), the dynamic-parallelism step launches it from the
// device (ops/device_driver.cuh, src/model/dp_decoder_step.cu). The
// architecture's order is written here once; a new architecture is a change
// to PlanDecoderStep. Plain data, copied to device memory as it is.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/decoder_config.h"
#include "collective/all_reduce_view.h"
#include "frame/step_view.h"
#include "kernels/attention/attention_split.h"
#include "kernels/decode_batch.h"
#include "ops/op.h"
#include "plan/model_tensors.h"

namespace baton::detail {

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

// One rank's share of a tensor-parallel step (issue #42; plan/
// tensor_parallel.h splits the weights): its layers run RankConfig's
// heads, key/value heads and FFN width; the attention output and down
// projections store partial sums that an all-reduce adds into the residual
// stream (ops/all_reduce.h); its LM head makes its vocabulary rows'
// logits in `logits_part`, which a gather puts side by side in the
// buffers' logits before token selection.
struct TensorParallelStep {
  AllReduceView view;           // this rank's view of the group (ranks >= 2)
  int vocab_rows = 0;           // the LM head's rows here: padded_vocab / ranks
  void* logits_part = nullptr;  // [max_batch, vocab_rows]
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
// lowered for `path` with `attention`. `view` is the step's frame whose
// per-row state the nodes read. With `tp`, one rank's plan: `config` is then
// the rank's (RankConfig) and `weights` its slices; the view keeps the whole
// model's (selection reads the whole vocabulary).
[[nodiscard]] std::vector<ops::OpNode> PlanDecoderStep(const DecoderConfig& config,
                                                       const ModelTensors& weights,
                                                       const std::vector<KvCacheLayer>& caches,
                                                       const StepBuffers& buffers,
                                                       const DecoderStepView& view, PlanPath path,
                                                       AttentionPlan attention,
                                                       const TensorParallelStep* tp = nullptr);

// The attention a bucket of `rows` rows runs: fused rows up to max_batch
// (decode steps, short chunks), appended chunks above (chunk attention where
// the head size allows it). A function of the shapes alone, so every engine
// makes the same choice for a bucket.
[[nodiscard]] AttentionPlan AttentionFor(const DecoderConfig& config, std::uint32_t rows,
                                         std::uint32_t max_batch);

}  // namespace baton::detail
