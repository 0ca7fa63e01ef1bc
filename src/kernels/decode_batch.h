// What the decode step's kernel bodies read to find their work: the batch of
// rows (or sequences) a launch covers, the KV cache of a layer, and a
// position's sampling parameters. Storage is the config's fp16/bf16,
// accumulation fp32; the residual stream stays fp32 between layers. Plain
// C++ (no Abseil), for host code that plans a step and device code alike;
// the ops that launch the bodies are described in src/ops/.
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
// Every op refuses shapes it cannot run with cudaErrorInvalidValue before
// any launch (its check(); ValidateDecoderConfig on the host names the
// reason: rows of d_model, ffn, vocab and heads * head_dim elements must be
// multiples of 8 and device pointers 16-byte aligned); capacity 0 launches
// nothing.
//
// Kernels are launched with programmatic dependent launch
// (baton/step_kernel.cuh): each may start while the node before it still
// runs and reads nothing an earlier node wrote until that node is done, so a
// captured chain of them behaves like plain stream order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/decoder_config.h"

namespace baton {

namespace detail::decode {
inline constexpr int kVector = 8;  // 2-byte elements per 16-byte load
}  // namespace detail::decode

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

// One position's sampling parameters (a request's), as token selection
// reads them by batch position (ops/select.h). All-zero bytes mean greedy.
struct PositionSampling {
  float temperature = 0.0f;  // <= 0 (or NaN): greedy
  std::uint32_t top_k = 0;   // 0 (or >= vocab): off
  float top_p = 1.0f;        // >= 1 (or NaN): off
  // Nonzero: the caller's selection hooks rewrite the row before it is read
  // (the decoder's penalties and min_tokens; select_body.cuh's adjust).
  std::uint16_t adjust = 0;
  // Nonzero: selection also computes the row's log-softmax for the caller's
  // hooks: the chosen token's and the best logprobs - 1 tokens' (at most
  // kMaxLogprobs; select_body.cuh's RowLogprobs).
  std::uint16_t logprobs = 0;
  unsigned long long seed = 0;
};
static_assert(sizeof(PositionSampling) == 24, "PositionSampling is a 24-byte device record");

}  // namespace baton
