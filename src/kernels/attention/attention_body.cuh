// Decode attention: the attention kernel's body (ops/attention.h), which
// every launch path runs with its tile and shared memory (AttentionShared)
// from its caller. Internal; Abseil-free.
//
// A model whose max_context does not split (attention_splits,
// kernels/attention/attention_split.h), in a launch that does not group short rows
// (AttentionShortRows), runs the single-pass kernel (kSinglePass): grid
// (rows, query heads), every row on the short path with its scores in
// dynamic shared memory (max_context floats). Otherwise grid (rows, query
// heads, z) with z = attention_blocks_per_head(config, rows), and each row
// takes one of two paths by its context, the model and the launch's
// AttentionShortRows alone, so its bits never depend on the batch or grid:
// - a context of one unit (at most kAttentionUnitKeys keys, every decode
//   step of a short conversation) in a launch of kPerQueryHead (or a model
//   the tensor-core path does not take): block (row, head, 0) attends for
//   its query head (attention_short_body.cuh); the other z leave at once;
// - a longer context, or one unit grouped: the group's query-head blocks of
//   the row, group x z of them, are the splits of its key/value head, each
//   reading its units' keys and values once for all the group's heads
//   (attention_split_mma_body.cuh on tensor cores for the models
//   attention_split_mma accepts, else attention_split_body.cuh); a single
//   unit is split 0's alone, written without scratch.
// Bits: a row's are its path's, whichever variant (AttentionPaths) holds it.
#pragma once

#include <type_traits>

#include "kernels/attention/attention_row.cuh"
#include "kernels/attention/attention_short_body.cuh"
#include "kernels/attention/attention_split_body.cuh"
#include "kernels/attention/attention_split_mma_body.cuh"
#include "kernels/tile.h"

namespace baton::detail::decode {

// Which paths a launch's kernel holds (ops/attention.h picks one per
// launch from the model and AttentionShortRows alone): each variant compiles
// only the bodies its rows can take, so that a body it never runs neither
// sets its registers nor spreads its code. The CUDA-core split body alone
// took every split kernel to 255 registers (ptxas, sm_90); the grouped
// tensor-core kernel, without the short path, fits three blocks per SM.
enum class AttentionPaths {
  kSinglePass,     // every row on the short path, scores max_context floats
  kSplitCudaCore,  // the short path and attention_split_body.cuh
  kSplitMma,       // the short path and attention_split_mma_body.cuh
  kGroupedMma,     // attention_split_mma_body.cuh alone (rows out of range: zeros)
  kGroupedMma64,   // the same for head_dim 64 only, three blocks per SM
};

template <class T>
union AttentionSinglePassShared {
  AttentionShortShared<T> short_path;
};
template <class T, int V, int H>
union AttentionCudaCoreShared {
  AttentionShortShared<T> short_path;
  AttentionSplitShared<T, V, H> split_path;
};
template <class T>
union AttentionMmaMixedShared {
  AttentionShortShared<T> short_path;
  AttentionMmaShared<T> mma_path;
};
template <class T>
union AttentionGroupedShared {
  AttentionMmaShared<T> mma_path;
};
// The static shared memory of a variant: its bodies' in one union.
template <class T, int V, int H, AttentionPaths Paths>
using AttentionShared = std::conditional_t<
    Paths == AttentionPaths::kSinglePass, AttentionSinglePassShared<T>,
    std::conditional_t<Paths == AttentionPaths::kSplitCudaCore, AttentionCudaCoreShared<T, V, H>,
                       std::conditional_t<Paths == AttentionPaths::kSplitMma,
                                          AttentionMmaMixedShared<T>, AttentionGroupedShared<T>>>>;

// out[r][h] = softmax(q_h · Kᵀ / sqrt(head_dim)) · V over the row's context
// [0, pos] (contract: ops/attention.h). With Rope the kernel
// rotates q (in place) and this token's k, appends k and v once, and takes
// the keys and values of the row's chunk before it (batch.fresh) from their
// qkv rows.
// The config, cache, batch and scratch by reference: the kernel's
// __grid_constant__ arguments (ops/op_kernel.cuh), which the out-of-line
// split bodies then read in place.
// Grid (rows, query heads[, z]) = tile. `sh` and `scores` are the caller's
// shared memory; `scores`, 128-byte aligned: max_context floats for
// kSinglePass, the tensor-core path's ring and states (attention_mma_layout)
// for the tensor-core variants, nothing for kSplitCudaCore.
template <class T, int V, int H, bool Rope, AttentionPaths Paths>
__device__ __forceinline__ void attention_body(const DecoderConfig& config, const float* inv_freq,
                                               T* qkv, const KvCacheLayer& cache,
                                               const DecodeBatch& batch,
                                               const AttentionScratch& scratch, Tile tile,
                                               AttentionShared<T, V, H, Paths>& sh, float* scores,
                                               T* out) {
  constexpr bool Split = Paths != AttentionPaths::kSinglePass;
  constexpr bool grouped =
      Paths == AttentionPaths::kGroupedMma || Paths == AttentionPaths::kGroupedMma64;
  constexpr bool kMma = grouped || Paths == AttentionPaths::kSplitMma;
  static_assert(!kMma || V == kVector, "the tensor-core path loads 16 bytes");
  const std::uint32_t p = tile.x;
  const int head = static_cast<int>(tile.y), z = static_cast<int>(tile.z);
  // (Grouped: short rows on tensor cores too; the kernel then has no short
  // path, and a row out of range gets zeros.)
  // A settled batch is looked up before the wait (the paths issue their
  // first loads before it too); otherwise after.
  if (!batch.settled) enter_step_node(batch);
  // With the position, the short path's first history rows: every row of
  // the cache below max_context is in bounds (a row at or past the
  // position is never used), so they need only the slot. Only for a row
  // that may take the short path: a long row's blocks skipped ~500 of the
  // ~3,500 instructions each warp runs (ncu, TP4 rank of the 8B shape, b1,
  // 576 tokens), all of them cold in the instruction cache.
  ShortHistory<T, V> early;
  const AttentionRow row =
      look_up_attention_row<Rope>(batch, config, p, [&](std::uint32_t slot, int pos) {
        if (z == 0 && !grouped && (!Split || pos < kAttentionUnitKeys)) {
          early.load(config, cache, slot, head / config.group_size(), 0, config.max_context);
        }
      });
  // A block with nothing to do leaves, before the wait when it can: block
  // (row, 0, 0) always stays, so the kernel still finishes after its
  // predecessor.
  if constexpr (grouped) {
    if (!row.in_range) {  // block (row, head, 0) writes the head's zeros
      if (batch.settled) enter_step_node(batch);
      if (z > 0 || !row.live) return;
      T* const out_row = out + static_cast<std::size_t>(p) * config.attention_width() +
                         static_cast<std::size_t>(head) * config.head_dim;
      const float zeros[V] = {};
      for (int i = threadIdx.x; i < config.head_dim / V; i += kAttentionThreads) {
        store_packed<T, V>(out_row + i * V, zeros);
      }
      return;
    }
  } else {
    if (!Split || !row.in_range || row.pos < kAttentionUnitKeys) {
      if (z > 0) return;
      attention_short_body<T, V, Rope>(config, inv_freq, qkv, cache, batch, row, head, early,
                                       sh.short_path, Split ? sh.short_path.scores : scores, out);
      return;
    }
  }
  if constexpr (Split) {
    const int group = config.group_size();
    const int split = (head % group) * static_cast<int>(tile.nz) + z;
    if (split >= attention_split(row.pos + 1).units) return;
    const int blocks = group * static_cast<int>(tile.nz);
    if constexpr (Paths == AttentionPaths::kGroupedMma64) {
      attention_split_mma_body_inline<T, Rope, 64>(
          config, inv_freq, qkv, cache, batch, row, head / group, split, blocks, scratch,
          sh.mma_path, reinterpret_cast<char*>(scores), out);
    } else if constexpr (kMma) {
      const auto body = [&](auto hd) {
        attention_split_mma_body<T, Rope, decltype(hd)::value>(
            config, inv_freq, qkv, cache, batch, row, head / group, split, blocks, scratch,
            sh.mma_path, reinterpret_cast<char*>(scores), out);
      };
      // The common head dims at compile time, any other from the config.
      if (config.head_dim == 64) {
        body(std::integral_constant<int, 64>{});
      } else if (config.head_dim == 128) {
        body(std::integral_constant<int, 128>{});
      } else {
        body(std::integral_constant<int, 0>{});
      }
    } else {
      attention_split_body<T, V, H, Rope>(config, inv_freq, qkv, cache, batch, row, head / group,
                                          split, blocks, scratch, sh.split_path, out);
    }
  }
}

}  // namespace baton::detail::decode
