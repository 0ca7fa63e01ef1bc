// The decode-step kernels of the small decoder-only transformer (issue 6):
// one new token for each of a batch of sequences. Storage is the config's
// fp16/bf16, accumulation fp32; the residual stream stays fp32 between layers.
// No Abseil (plain cudaError_t launchers), so step programs in .cu and .cc
// files and the dynamic-parallelism fallback can all use them.
//
// Batch layout: kernels work on the step's *rows* (tokens), r in [0,
// capacity): a decoding sequence has one row, a sequence reading its prompt
// a chunk of consecutive rows (baton/step_args.h). Activations are indexed by
// row; each row names its sequence's stable *slot* (KV cache) and its
// *position* in the sequence (the tokens before it). Every kernel covers
// `capacity` rows (the bucket, fixed at capture) and reads the live count
// *active at run time, so a captured graph serves any step up to capacity.
// Rows >= *active are never written. Kernels over the step's sequences
// instead (token selection, the logits) take the same struct with
// positions: one entry per sequence.
//
// Every launcher returns cudaErrorInvalidValue for shapes it cannot run
// (ValidateDecoderConfig on the host names the reason; rows of d_model, ffn,
// vocab and heads * head_dim elements must be multiples of 8 and device
// pointers 16-byte aligned) and otherwise the launch's error; capacity 0
// launches nothing.
//
// Kernels are launched with programmatic dependent launch
// (baton/step_kernel.cuh): each may start while the node before it still
// runs and reads nothing an earlier node wrote until that node is done, so a
// captured chain of them behaves like plain stream order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/decoder_config.h"
#include "kernels/attention_split.h"
#include "kernels/gemv_io.h"

namespace baton {

struct DecodeBatch {
  const std::uint32_t* active = nullptr;    // device: live rows (e.g. &StepHeader::tokens)
  std::uint32_t capacity = 0;               // rows the launch covers
  const std::uint32_t* slots = nullptr;     // device [capacity]: slot of row r's sequence
  const std::int32_t* positions = nullptr;  // device [capacity]: row r's index in its sequence
                                            // (= tokens already before it); < 0: skip the row
  std::uint32_t max_slots = 0;              // slots >= max_slots are skipped (never indexed)
  // True when *active, slots and positions were all written before the node
  // in front of the kernel began (by the scheduler and a step-begin node two
  // or more nodes back), and so were the residual stream a residual-add GEMV
  // adds to and the KV-cache rows before each sequence's chunk. A decode
  // kernel lets the next one launch only after its own wait (unless
  // launch_next_early), so such data is final when a kernel starts, and it
  // is read before the wait, off the step's critical path. Leave false (the
  // default) when the kernel just before may write them.
  bool settled = false;
  // Lets the next node launch as soon as this kernel starts rather than
  // after this kernel's wait, so that the next node's prologue (constant
  // weights, settled data) overlaps this kernel's whole run instead of only
  // its work after the wait. The next node may then start while this
  // kernel's predecessor still runs (and, if that one launched early too,
  // while the one before it runs): set it only when every read the next node
  // makes before its wait (none unless it is settled) is of data final by
  // then. Measured on an H200: the step's attention kernels start their
  // KV-cache loads late enough otherwise to cost about 1 us each.
  bool launch_next_early = false;
  // Optional [capacity]: how many rows of r's sequence come before r in this
  // step (its chunk's earlier rows). Attention reads those keys and values
  // from this step's qkv rows, not from the cache, which other blocks of the
  // same kernel are writing. Null: 0 for every row (one row per sequence).
  const std::uint32_t* fresh = nullptr;
  // Optional [capacity] (kernels over sequences: the logits' norm and
  // projection): the row each entry reads its input from. Null: entry p
  // reads row p.
  const std::uint32_t* rows = nullptr;
};

// KV cache of one layer, keys and values alike, in the config's dtype.
// Dense (page_table null): [max_slots, kv_heads, max_context, head_dim].
// Paged (baton/page_policy.h): [pool_pages, kv_heads, page_tokens, head_dim],
// token t of slot s in page page_table[s * pages_per_slot + t / page_tokens];
// a token whose page is not mapped (an entry >= pool_pages) is never
// written, and reads of it (which only a broken schedule makes) stay in
// bounds.
struct KvCacheLayer {
  void* keys = nullptr;
  void* values = nullptr;
  const std::uint32_t* page_table = nullptr;
  std::uint32_t pages_per_slot = 0;
  std::uint32_t page_shift = 0;  // log2(page_tokens)
  std::uint32_t pool_pages = 0;
};

// hidden[p] = embedding[tokens[p]] (fp32). A token outside [0, vocab) gives a
// zero row instead of reading out of bounds (the host validates prompts).
[[nodiscard]] cudaError_t EnqueueEmbedding(const DecoderConfig& config, const void* embedding,
                                           const std::int32_t* tokens, DecodeBatch batch,
                                           float* hidden, cudaStream_t stream);

// out[p] = hidden[p] / sqrt(mean(hidden[p]^2) + eps) * weight, rounded to the
// dtype (the input of the next GEMM).
[[nodiscard]] cudaError_t EnqueueRmsNorm(const DecoderConfig& config, const float* hidden,
                                         const void* weight, DecodeBatch batch, void* out,
                                         cudaStream_t stream);

// hidden[p] += delta[p] (delta [capacity, d_model] in the dtype): the
// residual connection after the attention output and FFN down projections.
[[nodiscard]] cudaError_t EnqueueResidualAdd(const DecoderConfig& config, float* hidden,
                                             const void* delta, DecodeBatch batch,
                                             cudaStream_t stream);

// EnqueueEmbedding then EnqueueRmsNorm(hidden, weight) -> out, as one kernel
// (the step's first layer input), with the same results.
[[nodiscard]] cudaError_t EnqueueEmbeddingRmsNorm(const DecoderConfig& config,
                                                  const void* embedding, const std::int32_t* tokens,
                                                  const void* weight, DecodeBatch batch,
                                                  float* hidden, void* out, cudaStream_t stream);

// EnqueueResidualAdd then EnqueueRmsNorm(hidden, weight) -> out, as one
// kernel (every residual connection is followed by a norm), with the same
// results: hidden bit-identical, out rounded once from fp32.
[[nodiscard]] cudaError_t EnqueueResidualAddRmsNorm(const DecoderConfig& config, float* hidden,
                                                    const void* delta, const void* weight,
                                                    DecodeBatch batch, void* out,
                                                    cudaStream_t stream);

// RoPE on q and k of qkv[r] = q (heads * head_dim) | k | v (kv_heads *
// head_dim each) at the row's position pos = positions[r]: pairs
// (2i, 2i+1) of each head rotate by pos * inv_freq[i] (inv_freq: head_dim / 2
// floats in device memory, RopeInverseFrequencies of kernels/rope.h). q is
// rotated in place; the rotated k and the v are appended to the cache at
// [slot][kv_head][pos] (through the page table when paged). A position
// outside [0, max_context) writes nothing (attention then outputs zeros);
// nor does one whose page is not mapped.
[[nodiscard]] cudaError_t EnqueueRopeAppendKv(const DecoderConfig& config, const float* inv_freq,
                                              void* qkv, KvCacheLayer cache, DecodeBatch batch,
                                              cudaStream_t stream);

// out[r][head] = softmax(q · K^T / sqrt(head_dim)) · V over the sequence's
// cache entries [0, pos] of key/value head head / group_size() (its context,
// this token included), for the q in qkv[r]: every row of the step already
// appended (EnqueueRopeAppendKv). A context of at most kAttentionUnitKeys
// keys takes one block per (row, query head), or with
// AttentionShortRows::kGrouped (for the models the tensor-core path takes)
// one per (row, key/value head) on tensor cores; a longer one is split along
// the context (kernels/attention_split.h): the group's blocks read each key
// and value once for all its query heads, each serving contiguous units
// whose softmax partials go through `scratch` and are combined in unit
// order. A row's path and bits depend on its q, its context and
// `short_rows` alone (not on the batch, the bucket or the grid). Contexts
// are limited by max_context alone. `scratch` must cover capacity rows when
// max_context exceeds one unit (attention_scratch_ok), and `short_rows` be
// one of its values, else cudaErrorInvalidValue before any launch.
[[nodiscard]] cudaError_t EnqueueDecodeAttention(
    const DecoderConfig& config, const void* qkv, KvCacheLayer cache, DecodeBatch batch,
    AttentionScratch scratch, void* out, cudaStream_t stream,
    AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead);

// EnqueueRopeAppendKv then EnqueueDecodeAttention as one kernel, with the
// same results and contract (q rotated in place, k and v appended once).
// Every block rotates its q and this token's k for itself; one block per
// (row, key/value head) appends k and v at pos. Keys and values of the row's
// chunk before it (batch.fresh) come from those rows of qkv, rotated here
// as the cache would hold them (the same bits), since their own blocks are
// appending them meanwhile.
[[nodiscard]] cudaError_t EnqueueRopeAttention(
    const DecoderConfig& config, const float* inv_freq, void* qkv, KvCacheLayer cache,
    DecodeBatch batch, AttentionScratch scratch, void* out, cudaStream_t stream,
    AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead);

// out[p][i] = silu(gate_up[p][i]) * gate_up[p][ffn + i]; silu(g) = g / (1 + e^-g).
[[nodiscard]] cudaError_t EnqueueSiluMul(const DecoderConfig& config, const void* gate_up,
                                         DecodeBatch batch, void* out, cudaStream_t stream);

// tokens[p] = argmax_i logits[p][i] (logits [capacity, vocab]). Ties go to the
// lowest index; NaN counts as -inf (so a row of NaNs yields token 0).
[[nodiscard]] cudaError_t EnqueueArgmax(const DecoderConfig& config, const void* logits,
                                        DecodeBatch batch, std::int32_t* tokens,
                                        cudaStream_t stream);

// Seeded sampling with the Gumbel-max trick: tokens[p] = argmax_i
// (logits[p][i] / temperature + g_i), g_i = -log(-log(u_i)), which draws from
// softmax(logits / temperature). u_i comes from curand's stateless Philox
// 4x32-10: curand_init(seed, subsequence = sequence_ids[p], offset = step *
// vocab + i) then one curand() call, whose 32 bits b give u = ((b >> 9) +
// 0.5) * 2^-23 (exact in fp32, strictly inside (0, 1)). So a token depends only on (seed,
// sequence id, the sequence's step, logits): not on batch position, bucket or
// engine, and steps of one sequence never reuse a counter. temperature <= 0
// means greedy (EnqueueArgmax's rule, ties included). top_k and top_p filter
// the tokens first, as EnqueueSamplePositions describes (one set of
// parameters for every position); the defaults filter nothing.
[[nodiscard]] cudaError_t EnqueueSample(const DecoderConfig& config, const void* logits,
                                        DecodeBatch batch, SamplingParams params,
                                        const std::uint64_t* sequence_ids,
                                        const std::uint32_t* sequence_steps, std::int32_t* tokens,
                                        cudaStream_t stream);

// One position's sampling parameters (a request's), as EnqueueSamplePositions
// reads them by batch position. All-zero bytes mean greedy.
struct PositionSampling {
  float temperature = 0.0f;  // <= 0 (or NaN): greedy
  std::uint32_t top_k = 0;   // 0 (or >= vocab): off
  float top_p = 1.0f;        // >= 1 (or NaN): off
  std::uint32_t pad = 0;
  unsigned long long seed = 0;
};
static_assert(sizeof(PositionSampling) == 24, "PositionSampling is a 24-byte device record");

// Token selection with each position's own parameters: params, sequence_ids
// and sequence_steps are device arrays [capacity] indexed by batch position
// (the Gumbel noise is EnqueueSample's, keyed by (params[p].seed,
// sequence_ids[p], sequence_steps[p])). For position p, with T, K, P its
// temperature, top_k, top_p and x_i its logits as stored (fp16/bf16):
//   - T <= 0: greedy, EnqueueArgmax's rule (NaN as -inf, ties to the lowest
//     index).
//   - T > 0, no filter (K == 0 or K >= vocab, and P >= 1): Gumbel-max over
//     the whole vocabulary, the same token EnqueueSample gives.
//   - Otherwise filtered, in transformers' warper order (temperature, top-k,
//     top-p). Tokens are ordered by an order-preserving 16-bit key of the
//     stored logit (NaN as -inf, -0 equal to +0): equal keys are equal
//     logits, a "key group". Top-k: theta_k = the K-th largest key counting
//     multiplicity; token i is kept iff key_i >= theta_k (ties at the
//     boundary all kept, as transformers' TopKLogitsWarper). Top-p, on the
//     tokens top-k kept: q_i = w_i / Z with w_i = exp((x_i - x_max) / T)
//     (w = 1 for the largest key, so rows of -inf and rows with +inf are
//     defined) and Z the sum over kept tokens; a key group is kept iff the
//     mass of kept tokens with a larger key is < P (transformers keeps a
//     token iff the mass strictly above it is < P; here tokens of equal
//     logit are kept or dropped together). The top group always survives.
//     token = argmax over the survivors of (x_i / T + g_i), EnqueueSample's
//     scores and noise, ties to the lowest index.
// Masses are summed as 64-bit fixed-point integers (weights rounded to
// 2^-40), exact and order-free, so a position's token depends only on its
// row and parameters: the same bits at any batch position, capacity, bucket
// or engine. The filtered path reads the row up to four times (L2 after the
// first); greedy and plain positions take the single pass of EnqueueArgmax /
// EnqueueSample.
[[nodiscard]] cudaError_t EnqueueSamplePositions(const DecoderConfig& config, const void* logits,
                                                 DecodeBatch batch, const PositionSampling* params,
                                                 const std::uint64_t* sequence_ids,
                                                 const std::uint32_t* sequence_steps,
                                                 std::int32_t* tokens, cudaStream_t stream);

// The runtime's own GEMV (DecoderGemm::kBatonGemv): y[p] = W · x[p], W
// [out_features, in_features] row-major, x [capacity, in_features], y
// [capacity, out_features], all in `dtype`, fp32 accumulation. Batch
// invariant: y[p] is bit-identical whatever the capacity, *active or p.
// in_features must be a multiple of 8 and W, x 16-byte aligned
// (cudaErrorInvalidValue otherwise).
[[nodiscard]] cudaError_t EnqueueGemv(DecoderDType dtype, const void* w, int out_features,
                                      int in_features, const void* x, DecodeBatch batch, void* y,
                                      cudaStream_t stream);

// The GEMV with any of its fusions (kernels/gemv_io.h: what each input and
// output reads and writes, and the optional bias), as the decoder's step
// plan launches it. Batch invariant like EnqueueGemv. kRmsNorm and
// kEmbeddingRmsNorm inputs store their output, kRmsNorm may also take
// kSiluMul; kGated takes kStore and kResidualAdd (cudaErrorInvalidValue
// otherwise). kSiluMul: w is a gate | up weight [out_features, in_features]
// (out_features even, no bias) and y [capacity, out_features / 2] gets
// silu(gate) * up of the two rounded halves, rounded: bit-identical to the
// stored GEMV (or RMSNorm GEMV) followed by EnqueueSiluMul, without the
// gate | up row or the row kernel. The decoder's GEMV path makes every
// FFN activation this way (one kernel fewer per layer).
[[nodiscard]] cudaError_t EnqueueGemvFused(DecoderDType dtype, detail::decode::GemvInput input,
                                           detail::decode::GemvOutput output, const void* w,
                                           int out_features, int in_features,
                                           const detail::decode::GemvIo& io, DecodeBatch batch,
                                           cudaStream_t stream);

// EnqueueSiluMul fused into EnqueueGemv's input: y[p] = W · m[p] with m[p][i]
// = silu(gate_up[p][i]) * gate_up[p][in_features + i] rounded to the dtype,
// so y is bit-identical to EnqueueSiluMul followed by EnqueueGemv. gate_up is
// [capacity, 2 * in_features]. Every row block recomputes m over the whole K
// (issue-bound for a wide FFN), so the decoder makes m in the gate | up GEMV
// instead (GemvOutput::kSiluMul).
[[nodiscard]] cudaError_t EnqueueGatedGemv(DecoderDType dtype, const void* w, int out_features,
                                           int in_features, const void* gate_up, DecodeBatch batch,
                                           void* y, cudaStream_t stream);

// The GEMV with the row kernels around it fused in: each removes one kernel,
// a whole dependent node, from the step (the decoder model's GEMV path runs
// five kernels per layer instead of seven, and no embedding kernel). Batch
// invariant like EnqueueGemv. With DecodeBatch::settled, the residual-add
// GEMVs also read the residual stream before the wait: it must then have
// been written two or more nodes back (never by the kernel just before).
//
// EnqueueRmsNorm fused into EnqueueGemv's input: y[p] = W · n[p] with n[p] =
// hidden[p] * s[p] * norm_weight rounded to the dtype, s[p] = 1 / sqrt(mean(
// hidden[p]^2) + rms_epsilon), W [out_features, d_model]. Each block
// recomputes s for its positions (a warp per position), summing the squares
// in another order than EnqueueRmsNorm: n may differ from its output in the
// last bit of the dtype (not bit-identical). hidden (fp32) and norm_weight
// 16-byte aligned.
// Whether the decoder model fuses the RMSNorm into a GEMV of this shape
// ([out_features, in_features]): the fused kernel holds more registers (two
// blocks per SM instead of three), so it is used where one tile of positions
// fits in one wave (every projection of a d_model 256 model; not a 32k
// vocabulary's logits). A function of the shape alone.
[[nodiscard]] bool GemvFusesRmsNorm(int out_features, int in_features);

[[nodiscard]] cudaError_t EnqueueRmsNormGemv(const DecoderConfig& config, const void* w,
                                             int out_features, const float* hidden,
                                             const void* norm_weight, DecodeBatch batch, void* y,
                                             cudaStream_t stream);

// EnqueueEmbedding fused into EnqueueRmsNormGemv (the step's first
// projection): hidden[p] = embedding[tokens[p]] (fp32, a zero row for a token
// outside [0, vocab)), written by the kernel, and y[p] = W · n[p] from it;
// hidden and y bit-identical to EnqueueEmbedding then EnqueueRmsNormGemv.
[[nodiscard]] cudaError_t EnqueueEmbeddingRmsNormGemv(const DecoderConfig& config,
                                                      const void* embedding,
                                                      const std::int32_t* tokens, const void* w,
                                                      int out_features, const void* norm_weight,
                                                      DecodeBatch batch, float* hidden, void* y,
                                                      cudaStream_t stream);

// EnqueueGemv then EnqueueResidualAdd as one kernel: hidden[p] += W · x[p]
// rounded to the dtype, bit-identical to the two kernels. W [d_model,
// in_features].
[[nodiscard]] cudaError_t EnqueueGemvResidualAdd(const DecoderConfig& config, const void* w,
                                                 int in_features, const void* x, DecodeBatch batch,
                                                 float* hidden, cudaStream_t stream);

// EnqueueGatedGemv then EnqueueResidualAdd as one kernel (the FFN's down
// projection and residual), bit-identical to the two kernels. W [d_model,
// in_features], gate_up [capacity, 2 * in_features].
[[nodiscard]] cudaError_t EnqueueGatedGemvResidualAdd(const DecoderConfig& config, const void* w,
                                                      int in_features, const void* gate_up,
                                                      DecodeBatch batch, float* hidden,
                                                      cudaStream_t stream);

}  // namespace baton
