// How decode attention splits a row's context across blocks (split-K, or
// "flash-decoding"): the layout is a function of the context alone, so a
// row's bits never depend on the batch, the bucket or the engine's grid.
// Plain C++ (host and device): the op sizes grids and scratch with it,
// the kernel body walks it, the tests check it.
//
// A row attends over `context` keys in tiles of kAttentionTile. The tiles
// are dealt to `units` contiguous runs (at most kAttentionMaxUnits, each at
// least kAttentionUnitKeys keys but the last): a unit is one block's work,
// its softmax partial (max, sum, unnormalized output) written to scratch and
// combined in unit order by whichever block finishes last. A context of one
// unit writes its output directly (no scratch, no combine).
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton/config.h"
#include "baton/decoder_config.h"

namespace baton {

inline constexpr int kAttentionTile = 256;      // units are whole tiles
inline constexpr int kAttentionUnitKeys = 256;  // keys a unit holds at least (but the last)
inline constexpr int kAttentionMaxUnits = 64;   // units per (row, key/value head)
// Blocks of one launch: two per SM of an H100/H200 (132 SMs), all resident
// at once (kernels/attention/attention_row.cuh), which keeps enough loads in flight
// for a long context at batch 1. A block with no unit of its row leaves
// after loading the row's position.
inline constexpr int kAttentionTargetBlocks = 264;

// Decode attention splits along the context for every model whose
// max_context exceeds one unit; a row of at most kAttentionUnitKeys keys
// takes the short path, one block per (row, query head), unless the launch
// groups short rows (AttentionShortRows below). The
// single-pass kernel (the context's scores in shared memory, one block per
// query head reading its whole context) served every max_context up to
// 8,192 until, on an H100, Llama-3.2-1B steps at 512-640-token contexts
// measured 6% (b1, b8) and 19% (b32) faster on the split kernel; it costs
// 2-5% on steps whose rows are all short
// (results/h100-2026-11-25-decode-same-call-split-from-257-*).
inline constexpr int kAttentionSplitContext = kAttentionUnitKeys;

[[nodiscard]] BATON_HOST_DEVICE inline bool attention_splits(const DecoderConfig& config) {
  return config.max_context > kAttentionSplitContext;
}

// The tensor-core split path (kernels/attention/attention_split_mma_body.cuh) serves
// every model whose head_dim is a multiple of 16 up to 128 and whose group
// of query heads fits one mma's 16 rows (every Llama, Qwen2 and Mistral
// checkpoint); other models take the CUDA-core split path
// (attention_split_body.cuh). Both are functions of the model alone.
inline constexpr int kAttentionMmaTileKeys = 64;  // keys per K/V tile of the ring
inline constexpr int kAttentionMmaRows = 16;      // query heads of a group: one mma's M
inline constexpr unsigned kAttentionMmaWarps = 4;

[[nodiscard]] BATON_HOST_DEVICE inline bool attention_split_mma(const DecoderConfig& config) {
  return config.head_dim % 16 == 0 && config.head_dim <= 128 &&
         config.group_size() <= kAttentionMmaRows;
}

// How a launch attends its rows of one unit (at most kAttentionUnitKeys
// keys), chosen by the caller for the whole launch: the step's plan picks
// kPerQueryHead on Baton's batch-invariant GEMV path and kGrouped on the
// cuBLASLt path (src/plan/step_plan.cc), so a row's bits depend on its q,
// its context, the model and this choice alone.
// - kPerQueryHead: a block per (row, query head) (attention_short_body.cuh),
//   its keys' loads issued before the wait on the previous node: the
//   shortest path after that wait, for steps of a few rows.
// - kGrouped: the tensor-core path's block per (row, key/value head) for
//   every model attention_split_mma accepts, reading each key and value once
//   for the group's query heads. On an H100 (Llama-3.2-1B, contexts under
//   256 keys, one call) it took a b32 step from 1795 to 1625 us; grouped at
//   b1 too, a step went from 1100 to 1205 us (8 blocks instead of 32, each
//   with more dependent steps after its wait), hence the GEMV's choice
//   (results/h100-2026-11-25-attention-short-rows-grouped-llama-3.2-1b.json).
enum class AttentionShortRows : std::uint32_t { kPerQueryHead = 0, kGrouped = 1 };

// Whether rows of one unit take the tensor-core path.
[[nodiscard]] BATON_HOST_DEVICE inline bool attention_groups_short_rows(
    const DecoderConfig& config, AttentionShortRows short_rows) {
  return short_rows == AttentionShortRows::kGrouped && attention_split_mma(config);
}

// The tensor-core path's dynamic shared memory: a ring of K/V tiles (rows of
// 128 bytes for head_dim <= 64, else 256; three tiles, or two of the wider
// rows, so that two blocks still fit an SM), then each warp's unit state
// (its group's unnormalized outputs, maxima and sums) for the warp-order
// combine.
// A ring row's bytes and the ring's stages for a head_dim: what the layout
// below and the body (which knows the common head dims at compile time) use.
// A deeper ring (as many stages as the blocks per SM leave room for: 4 at
// head_dim 64, 3 at 128, so a unit's tiles are in flight before the wait)
// made every step slower on an H200, 1-6%
// (results/h200-2026-11-28-attention-ring-attempt-llama.json).
[[nodiscard]] BATON_HOST_DEVICE constexpr unsigned attention_mma_row_bytes(int head_dim) {
  return head_dim <= 64 ? 128u : 256u;
}
[[nodiscard]] BATON_HOST_DEVICE constexpr unsigned attention_mma_stages(int head_dim) {
  return head_dim <= 64 ? 3u : 2u;
}
// Floats of one warp's state per query head in the tensor-core path's
// states: head_dim outputs, the maximum and the sum, padded so that every
// row is 16-byte aligned (the combine reads four dims at once).
[[nodiscard]] BATON_HOST_DEVICE constexpr unsigned attention_mma_state_floats(int head_dim) {
  return (static_cast<unsigned>(head_dim) + 2u + 3u) / 4u * 4u;
}
struct AttentionMmaLayout {
  unsigned row_bytes = 0;
  unsigned stages = 0;
  unsigned stage_bytes = 0;  // one tile's keys and values
  unsigned states = 0;       // byte offset of the warps' states
  unsigned bytes = 0;        // in all
};
[[nodiscard]] BATON_HOST_DEVICE inline AttentionMmaLayout attention_mma_layout(
    const DecoderConfig& config) {
  AttentionMmaLayout l;
  l.row_bytes = attention_mma_row_bytes(config.head_dim);
  l.stages = attention_mma_stages(config.head_dim);
  l.stage_bytes = 2u * kAttentionMmaTileKeys * l.row_bytes;
  l.states = l.stages * l.stage_bytes;
  const unsigned group = static_cast<unsigned>(config.group_size());
  l.bytes =
      l.states + kAttentionMmaWarps * group * attention_mma_state_floats(config.head_dim) * 4u;
  return l;
}

struct AttentionSplit {
  int units = 1;           // contiguous runs of tiles, one partial each
  int tiles_per_unit = 1;  // the last unit may hold fewer
};

[[nodiscard]] BATON_HOST_DEVICE inline AttentionSplit attention_split(int context) {
  AttentionSplit s;
  const int tiles = (context + kAttentionTile - 1) / kAttentionTile;
  if (context <= kAttentionUnitKeys) {
    s.tiles_per_unit = tiles < 1 ? 1 : tiles;
    return s;
  }
  int wanted = (context + kAttentionUnitKeys - 1) / kAttentionUnitKeys;
  if (wanted > kAttentionMaxUnits) wanted = kAttentionMaxUnits;
  s.tiles_per_unit = (tiles + wanted - 1) / wanted;
  s.units = (tiles + s.tiles_per_unit - 1) / s.tiles_per_unit;
  return s;
}

// The blocks per (row, query head) a launch of `capacity` rows gives (grid
// z; kernels/attention/attention_body.cuh): at most kAttentionTargetBlocks in all
// (one wave, all resident) but never fewer than one, never more than the
// longest context's units need (a key/value
// head's splits are the group's query-head blocks, group x z of them). Any
// count gives the same bits.
[[nodiscard]] BATON_HOST_DEVICE inline unsigned attention_blocks_per_head(
    const DecoderConfig& config, std::uint32_t capacity) {
  if (!attention_splits(config)) return 1;
  const unsigned units = static_cast<unsigned>(attention_split(config.max_context).units);
  const unsigned group = static_cast<unsigned>(config.group_size());
  const unsigned most = group == 0 ? 1 : (units + group - 1) / group;
  const unsigned pairs = capacity * static_cast<unsigned>(config.heads);
  unsigned z = pairs == 0 ? 1 : kAttentionTargetBlocks / pairs;
  if (z > most) z = most;
  return z < 1 ? 1 : z;
}

// Device scratch the split contexts need: per (row, query head, unit) the
// unnormalized output (head_dim floats) and the (max, sum) pair, and per
// (row, key/value head) an arrival count that must start at zero (each
// launch leaves it zero again). Rows: the largest capacity launched with it.
struct AttentionScratch {
  float* partials = nullptr;          // [rows][heads][kAttentionMaxUnits][head_dim + 2]
  std::uint32_t* arrivals = nullptr;  // [rows][kv_heads], zeroed once
  std::uint32_t rows = 0;
};

// Whether `scratch` serves a launch of `capacity` rows: the single-pass
// kernel reads none; longer ones need partials and arrivals for every row.
[[nodiscard]] inline bool attention_scratch_ok(const DecoderConfig& config, std::uint32_t capacity,
                                               const AttentionScratch& scratch) {
  if (!attention_splits(config)) return true;
  return scratch.partials != nullptr && scratch.arrivals != nullptr && scratch.rows >= capacity;
}

// Floats of AttentionScratch::partials for `rows` rows (0 when the model
// does not split: no scratch is read).
[[nodiscard]] inline std::size_t attention_scratch_floats(const DecoderConfig& config,
                                                          std::uint32_t rows) {
  if (!attention_splits(config)) return 0;
  return std::size_t{rows} * config.heads * kAttentionMaxUnits * (config.head_dim + 2);
}
[[nodiscard]] inline std::size_t attention_scratch_arrivals(const DecoderConfig& config,
                                                            std::uint32_t rows) {
  if (!attention_splits(config)) return 0;
  return std::size_t{rows} * config.key_value_heads();
}

}  // namespace baton
