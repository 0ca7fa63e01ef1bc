// What both paths of decode attention share (kernels/attention_body.cuh):
// the block size, the row a block serves as looked up from the batch, and
// the launchers' instantiation choice. Internal; Abseil-free.
#pragma once

#include "kernels/attention_split.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/rope_body.cuh"

namespace baton::detail::decode {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / 32;
// Blocks resident per SM (__launch_bounds__): the split path keeps a warp
// tile's loads and its accumulators in up to 255 registers (a 224 cap made
// it spill and long contexts 8-20% slower, H100, 2026-11-25).
inline constexpr int kAttentionMinBlocks = 2;

// Query heads one pass of the split path serves: 4, or 8 for larger groups
// (the launchers pick; a group past 8 takes several passes).
__host__ __device__ constexpr int attention_pass_heads(int group_size) {
  return group_size <= 4 ? 4 : 8;
}

// Calls f.template operator()<V, H>() with the config's load width (8
// elements when head_dim allows, else 2) and query heads per pass; host and
// device (the dynamic-parallelism step launches from the GPU).
template <class F>
__host__ __device__ cudaError_t dispatch_attention(const DecoderConfig& config, const F& f) {
  const bool wide = config.head_dim % kVector == 0;
  if (attention_pass_heads(config.group_size()) == 8) {
    return wide ? f.template operator()<kVector, 8>() : f.template operator()<2, 8>();
  }
  return wide ? f.template operator()<kVector, 4>() : f.template operator()<2, 4>();
}

// A launch of `capacity` rows (both launchers): the single-pass kernel's
// grid (rows, query heads) with max_context floats of scores in dynamic
// shared memory, or the split kernel's (rows, query heads, z) with the
// tensor-core path's ring (none for the CUDA-core path).
struct AttentionLaunchShape {
  bool split;
  dim3 grid;
  unsigned shared_bytes;
};
__host__ __device__ inline AttentionLaunchShape attention_launch_shape(const DecoderConfig& config,
                                                                       std::uint32_t capacity) {
  const unsigned heads = static_cast<unsigned>(config.heads);
  if (!attention_splits(config)) {
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
  bool live = false;      // p < the batch's active rows
  bool in_range = false;  // live, with a valid slot and position
  std::uint32_t slot = 0;
  int pos = 0;
  int hist = 0;
};

// One round of loads (look_up_sequence and the chunk's fresh count). With
// Rope and batch.fresh, rows p - fresh .. p - 1 are this row's chunk; a
// forged count past the sequence's start reads no row before the step's
// first.
// `at_slot(slot)` runs with the loads (look_up_sequence).
template <bool Rope, class AtSlot>
__device__ inline AttentionRow look_up_attention_row(const DecodeBatch& batch,
                                                     const DecoderConfig& config, std::uint32_t p,
                                                     AtSlot&& at_slot) {
  AttentionRow row;
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

}  // namespace baton::detail::decode
