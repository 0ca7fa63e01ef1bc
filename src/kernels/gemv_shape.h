// The GEMVs' shapes (kernels/gemv_body.cuh, kernels/wide_gemv_body.cuh):
// their block tiles, and how far a weight's K is split across a cluster,
// each a function of the weight's shape alone (batch invariance). Plain C++:
// the ops' launch shapes (ops/gemv.h, ops/wide_gemv.h) and the decoder's
// plan (which fuses a norm where the shape allows) read it on the host, the
// bodies on the device.
#pragma once

#include "baton/config.h"
#include "kernels/gemv_io.h"

namespace baton::detail::decode {

inline constexpr int kMmaRows = 16;
inline constexpr int kMmaPositions = 8;
inline constexpr int kMmaWarps = 8;
inline constexpr int kMmaK = 32;  // elements of a row per k-block (two mmas)
inline constexpr int kMmaUnroll = 4;
inline constexpr int kMmaMaxSplit = 8;        // blocks of a cluster (portable size)
inline constexpr int kMmaTargetBlocks = 264;  // two per SM of an H100/H200: one wave

inline constexpr bool normed_input(GemvInput input) {
  return input == GemvInput::kRmsNorm || input == GemvInput::kEmbeddingRmsNorm;
}

// How many blocks (one cluster) split the K of a [out_features, in_features]
// weight. A split costs a cluster barrier and the gather into block 0 (about
// 1 us on an H100), so K is split only as far as it takes for each warp's
// k-blocks to be one round of loads (kMmaUnroll in flight). H100, b1: the
// tiny model's FFN down GEMV (24 k-blocks) as 16 blocks instead of 16
// clusters of 3 took its step 40.7 -> 38.2 us; the d_model 1024 model's
// attention output GEMV (32 k-blocks) unsplit, 135 -> 132 us. Long rows
// split further, up to about kMmaSplitTargetBlocks blocks. That
// target stays below the two blocks per SM the GEMV's registers allow
// because clusters are placed a GPC at a time: on an H200 the d_model 1024
// model's FFN down GEMV (64 row blocks) as 64 clusters of 4 did not fit one
// wave, and the b1 step took 26 us longer over 4 layers than with clusters
// of 3. Clusters of 2 place one per SM pair without that loss, so a shape
// whose row blocks leave it unsplit still pairs its blocks when two rounds
// or more of loads remain and two blocks per row block fit one wave: H200,
// Llama-3.2-1B at b1, the FFN down GEMV (128 row blocks x 256 k-blocks) and
// the attention output GEMV (128 x 64) as 128 clusters of 2 took the step
// 1074 -> 907 us (the QKV GEMV's 192 row blocks paired, 384 blocks, made it
// 1018 us; results/h200-2026-11-23-gemv-split.json). A function of the
// shape alone, never of the batch (batch invariance).
inline constexpr int kMmaSplitTargetBlocks = 192;

[[nodiscard]] BATON_HOST_DEVICE constexpr int gemv_split(int out_features, int in_features) {
  const int row_blocks = (out_features + kMmaRows - 1) / kMmaRows;
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  const int one_round = (k_blocks + kMmaWarps * kMmaUnroll - 1) / (kMmaWarps * kMmaUnroll);
  const int target = kMmaSplitTargetBlocks / row_blocks;
  int split = one_round < target ? one_round : target;
  split = split < 1 ? 1 : split > kMmaMaxSplit ? kMmaMaxSplit : split;
  if (split == 1 && one_round >= 2 && 2 * row_blocks <= kMmaTargetBlocks) split = 2;
  while (split > 1 && split * kMmaWarps > k_blocks) --split;
  return split;
}

// Whether the decoder step fuses the RMSNorm into a GEMV of this shape
// (GemvInput::kRmsNorm). The fused kernel needs more registers (two blocks
// per SM instead of three), which costs nothing while one tile of positions
// fits in one wave of kMmaTargetBlocks blocks and costs waves above it (a
// 32k-vocabulary logits GEMV). A function of the shape alone, so every
// engine and bucket makes the same choice (batch invariance).
[[nodiscard]] BATON_HOST_DEVICE constexpr bool gemv_fuses_norm(int out_features, int in_features) {
  return (out_features + kMmaRows - 1) / kMmaRows * gemv_split(out_features, in_features) <=
         kMmaTargetBlocks;
}

// The wide GEMV's (kernels/wide_gemv_body.cuh): a block of kWideThreads owns
// kWideRows weight rows and every position of its tile.
inline constexpr int kWideWarps = 8;
inline constexpr int kWideThreads = kWideWarps * 32;
inline constexpr int kWideRows = kWideWarps * kMmaRows;      // weight rows a block owns
inline constexpr int kWideChunkBlocks = 4;                   // k-blocks of kMmaK per staged chunk
inline constexpr int kWideChunk = kWideChunkBlocks * kMmaK;  // 128 elements
inline constexpr int kWideStride = kWideChunk + 32;          // a staged row: 320 bytes, 64 mod 128
inline constexpr int kWideMaxSplit = 8;                      // blocks of a cluster (portable size)
inline constexpr int kWideTargetBlocks = 264;                // two per SM of an H100/H200: one wave

// Output features a block writes: 128, or 64 gate|up pairs for kSiluMul
// (warp w's mma rows 0-7 are gate rows, 8-15 the matching up rows).
[[nodiscard]] BATON_HOST_DEVICE constexpr int wide_block_outputs(GemvOutput output) {
  return output == GemvOutput::kSiluMul ? kWideRows / 2 : kWideRows;
}

[[nodiscard]] BATON_HOST_DEVICE constexpr int wide_row_blocks(GemvOutput output, int out_features) {
  const int outputs = output == GemvOutput::kSiluMul ? out_features / 2 : out_features;
  return (outputs + wide_block_outputs(output) - 1) / wide_block_outputs(output);
}

// The blocks (a power of two, at most 8) that split a row block's K: doubled
// while the grid stays within one wave of two blocks per SM and every block
// keeps at least two chunks of K. A function of the shape alone (the bits
// depend on it). Llama-3.2-1B: QKV and attention output 8 (192 and 128
// blocks), gate|up 2 (256), FFN down 8 (128), LM head 1 (1002).
[[nodiscard]] BATON_HOST_DEVICE constexpr int wide_gemv_split(int row_blocks, int in_features) {
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  int split = 1;
  while (split < kWideMaxSplit && row_blocks * split * 2 <= kWideTargetBlocks &&
         k_blocks >= split * 2 * 2 * kWideChunkBlocks) {
    split *= 2;
  }
  return split;
}

}  // namespace baton::detail::decode
