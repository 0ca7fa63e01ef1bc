// What both paths of decode attention share (kernels/attention/attention_body.cuh):
// the block size, the row a block serves as looked up from the batch, and
// the launch shape. Internal; Abseil-free.
#pragma once

#include "kernels/attention/attention_split.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/rope_body.cuh"

namespace baton::detail::decode {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / 32;
// Blocks resident per SM (__launch_bounds__): the split path keeps a warp
// tile's loads and its accumulators in up to 255 registers (a 224 cap made
// it spill and long contexts 8-20% slower, H100, 2026-11-25).
inline constexpr int kAttentionMinBlocks = 2;
// The grouped tensor-core kernel for head_dim 64 (ops/attention.h): three,
// which its ring and states leave room for.
inline constexpr int kAttentionGroupedMinBlocks = 3;

// Query heads one pass of the split path serves: 4, or 8 for larger groups
// (the op picks; a group past 8 takes several passes).
__host__ __device__ constexpr int attention_pass_heads(int group_size) {
  return group_size <= 4 ? 4 : 8;
}

// A launch of `capacity` rows (ops/attention.h, on every launch path): the
// single-pass kernel's grid (rows, query heads) with max_context floats of
// scores in dynamic shared memory when max_context does not split and short
// rows are not grouped; else the split kernel's (rows, query heads, z) (z = 1
// when max_context does not split) with the tensor-core path's ring (none
// for the CUDA-core path).
struct AttentionLaunchShape {
  bool split;
  dim3 grid;
  unsigned shared_bytes;
};
__host__ __device__ inline AttentionLaunchShape attention_launch_shape(
    const DecoderConfig& config, std::uint32_t capacity, AttentionShortRows short_rows) {
  const unsigned heads = static_cast<unsigned>(config.heads);
  if (!attention_splits(config) && !attention_groups_short_rows(config, short_rows)) {
    return {false, dim3(capacity, heads),
            static_cast<unsigned>(sizeof(float)) * static_cast<unsigned>(config.max_context)};
  }
  return {true, dim3(capacity, heads, attention_blocks_per_head(config, capacity)),
          attention_split_mma(config) ? attention_mma_layout(config).bytes : 0u};
}

// The row p of a step as attention sees it: its sequence's slot and
// position, and hist, the rows of its context already in the cache (the rest,
// [hist, pos), are this step's chunk before it: their k and v are in qkv).
struct AttentionRow {
  std::uint32_t index = 0;  // p: the row of qkv and out
  bool live = false;        // p < the batch's active rows
  bool in_range = false;    // live, with a valid slot and position
  std::uint32_t slot = 0;
  int pos = 0;
  int hist = 0;
};

// One round of loads (look_up_sequence and the chunk's fresh count). With
// Rope and batch.fresh, rows p - fresh .. p - 1 are this row's chunk; a
// forged count past the sequence's start reads no row before the step's
// first.
// `at_slot(slot, pos)` runs with the loads (look_up_sequence).
template <bool Rope, class AtSlot>
__device__ inline AttentionRow look_up_attention_row(const DecodeBatch& batch,
                                                     const DecoderConfig& config, std::uint32_t p,
                                                     AtSlot&& at_slot) {
  AttentionRow row;
  row.index = p;
  int fresh = Rope && batch.fresh != nullptr ? static_cast<int>(batch.fresh[p]) : 0;
  row.in_range = look_up_sequence(batch, config, p, row.live, row.slot, row.pos, at_slot);
  fresh = fresh > row.pos ? row.pos : fresh > static_cast<int>(p) ? static_cast<int>(p) : fresh;
  row.hist = row.pos - (fresh < 0 ? 0 : fresh);
  return row;
}

// The piece [d, d + V) of the key of an earlier row t of this row's chunk,
// rotated and rounded as the cache will hold it (its own block appends it
// meanwhile). Rare (chunk steps of the fused kernel), so kept out of line:
// inlined into the unrolled tile loads, its sincosf made the kernel's code
// several times larger than the instruction cache.
template <class T, int V>
__device__ __noinline__ Packed<T, V> chunk_key_piece(const DecoderConfig& config,
                                                     const float* inv_freq, const T* k_row, int t,
                                                     int d) {
  float rotated[V];
  rotated_piece<T, V>(k_row, d, RopeAngles<V>(config, inv_freq, t, d), rotated);
  Packed<T, V> out;
  store_packed<T, V>(reinterpret_cast<T*>(&out.bits), rotated);
  return out;
}

// Both split paths' RoPE at this token's position: a table of sin and cos
// per pair of dims, computed once per block (one inlined sincosf is a few
// hundred instructions of code; the caller syncs before reading it), read
// back a piece at a time.
__device__ inline void fill_angle_table(const float* inv_freq, int pos, int head_dim, float* sin,
                                        float* cos) {
  for (int i = threadIdx.x; i < head_dim / 2; i += kAttentionThreads) {
    sincosf(static_cast<float>(pos) * inv_freq[i], &sin[i], &cos[i]);
  }
}
template <int V>
__device__ inline RopeAngles<V> table_angles(const float* sin, const float* cos, int d) {
  RopeAngles<V> a;
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    a.s[i] = sin[d / 2 + i];
    a.c[i] = cos[d / 2 + i];
  }
  return a;
}

// Rotates the `heads` query heads from q in place, with the table's angles:
// the block that writes a split row's output does it, when every other block
// of the row has read q.
template <class T, int V>
__device__ inline void rope_group_queries(T* q, int heads, int head_dim, const float* sin,
                                          const float* cos) {
  const int pieces = head_dim / V;
  for (int i = threadIdx.x; i < heads * pieces; i += kAttentionThreads) {
    const int d = (i % pieces) * V;
    float unused[V];
    rope_query_piece<T, V>(q + static_cast<std::size_t>(i / pieces) * head_dim, d,
                           table_angles<V>(sin, cos, d), unused);
  }
}

// Whether this block is the last of the `participants` blocks serving key/
// value head kv_head of row p to finish its units: the one that combines
// their partials, in unit order, so the same bits whichever block it is.
// The arrival count is left at zero for the next launch. Block-uniform;
// `finishes` is a flag in the block's shared memory.
__device__ inline bool last_split_block(const DecoderConfig& config,
                                        const AttentionScratch& scratch, std::uint32_t p,
                                        int kv_head, int participants, bool& finishes) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t* count =
        scratch.arrivals + static_cast<std::size_t>(p) * config.key_value_heads() + kv_head;
    finishes = atomicAdd(count, 1u) + 1 == static_cast<std::uint32_t>(participants);
    if (finishes) *count = 0;  // every block has arrived
  }
  __syncthreads();
  if (!finishes) return false;
  __threadfence();
  return true;
}

// A split path block's end (both split bodies): with one unit the block
// wrote the output itself; with more, the last of the row's blocks to
// arrive combines the units' partials in unit order (`combine`, the same
// bits whichever block it is). The block that writes the output then
// stores the group's q rotated (`rotate_q`; nothing without RoPE).
template <class Combine, class RotateQ>
__device__ __forceinline__ void finish_split_row(const DecoderConfig& config,
                                                 const AttentionScratch& scratch, std::uint32_t p,
                                                 int kv_head, int blocks,
                                                 const AttentionSplit& split, bool& finishes,
                                                 Combine&& combine, RotateQ&& rotate_q) {
  if (split.units > 1) {
    const int participants = blocks < split.units ? blocks : split.units;
    if (!last_split_block(config, scratch, p, kv_head, participants, finishes)) return;
    combine();
  }
  rotate_q();
}

}  // namespace baton::detail::decode
