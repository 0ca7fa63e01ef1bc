// Causal attention for a step whose positions each hold a chunk of token
// rows (prefill chunks and single decoding tokens alike): FlashAttention-2 on
// tensor cores, grouped-query aware (kernels/attention/chunk_attention_body.cuh; the op
// is ops/chunk_attention.h). Plain C++ (no Abseil): the batch, the grid and
// the contract.
//
// Position p (p < *active, p < capacity) owns rows [first_row[p],
// first_row[p] + tokens[p]) of qkv and out; its row i is sequence position
// start[p] + i of the sequence at KV-cache slot slots[p], and attends
// causally over that sequence's keys [0, start[p] + i] of the key/value head
// of its query head (head h reads kv head h / group_size()):
//   out[r][h * head_dim + d] = softmax(q · Kᵀ / sqrt(head_dim)) · V.
// Every key and value it reads is already in the cache (the chunk's own rows
// included: a kernel before this one rotated and appended them).
//
// A position is skipped (its rows are never written) when it is dead (p >=
// *active), empty (tokens 0), at a slot >= max_slots, at start < 0, or out
// of range (start + tokens > max_context or first_row + tokens > rows).
// Rows no live position owns are never written either. The row ranges of
// live positions must not overlap (each row is one token of one sequence).
//
// Deterministic: one block computes each output row, summing in a fixed
// order (no atomics), so the bits never depend on timing, and a row's bits
// depend only on its q, its context and the group size (not on the other
// positions or on capacity).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/config.h"
#include "baton/decoder_config.h"
#include "kernels/decode_batch.h"

namespace baton {

struct ChunkAttentionBatch {
  const std::uint32_t* active = nullptr;     // device: live positions (p < *active)
  std::uint32_t capacity = 0;                // positions the launch covers
  std::uint32_t rows = 0;                    // rows the launch covers (qkv/out have this many)
  const std::uint32_t* tokens = nullptr;     // [capacity] rows of position p this step (0: none)
  const std::uint32_t* first_row = nullptr;  // [capacity] p's first row (rows of p are consecutive)
  const std::uint32_t* slots = nullptr;      // [capacity] p's KV-cache slot (>= max_slots: skip p)
  // [capacity] sequence position of p's first row (<0: skip p)
  const std::int32_t* start = nullptr;
  std::uint32_t max_slots = 0;
  // As DecodeBatch's (PDL): lets the next node launch before this kernel's
  // wait; settled data may be read before the wait.
  bool launch_next_early = false;
};

namespace detail::chunk {
// Query rows one block serves: 4 warps of 16 rows, each row a (token, query
// head of the group) pair, token-major (row = token * group + head in group).
inline constexpr int kTileRows = 64;
inline constexpr int kThreads = 128;
inline constexpr int kMinHeadDim = 16;  // head sizes: multiples of 16 in [16, 128]
inline constexpr int kMaxHeadDim = 128;
}  // namespace detail::chunk

// The grid ops::ChunkAttention launches for `capacity` positions and
// `rows` rows: x covers the worst case of tiles, sum over positions of
// ceil(tokens * group / 64) <= ceil(rows * group / 64) + capacity (each
// position wastes less than one tile), y = key/value heads. Blocks beyond the
// step's actual tiles exit at once. A device launch passes the actual rows
// and live positions instead (any grid that covers the tiles of the live
// positions is correct). Callable on the device.
[[nodiscard]] BATON_HOST_DEVICE inline dim3 chunk_attention_grid(const DecoderConfig& config,
                                                                 std::uint32_t capacity,
                                                                 std::uint32_t rows) {
  const unsigned long long query_rows =
      static_cast<unsigned long long>(rows) * static_cast<unsigned>(config.group_size());
  const unsigned long long tiles =
      (query_rows + detail::chunk::kTileRows - 1) / detail::chunk::kTileRows + capacity;
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(config.key_value_heads()), 1);
}

}  // namespace baton
