// The chunk attention's body (kernels/attention/chunk_attention.h, ops/chunk_attention.h),
// which every launch path runs with its tile and shared memory
// (ChunkAttentionShared) from its caller. Internal; Abseil-free.
//
// FlashAttention-2 on tensor cores. A block serves one (position, key/value
// head) and a tile of kTileRows query rows of that position; a query row is a
// (token, query head of the group) pair, token-major (row = token * group +
// head in group), so the group's query heads share every K/V tile the block
// streams: K/V are read once per group, not once per query head, and a
// decoding token with group 4 is 4 query rows of one block. Each of the 4
// warps owns 16 rows: S = Q·Kᵀ and O = P·V with mma.sync m16n8k16 (fp32
// accumulation), an online softmax in fp32 in the log2 domain (exp2 with
// the 1/sqrt(head_dim) scale folded in; P enters the mma as hi + lo in the
// storage type, see split()), keys streamed in tiles of
// kTileKeys through a kStages-deep cp.async ring, fragments read with
// ldmatrix (.trans for V) from XOR-swizzled shared memory. Shared memory does
// not grow with the context: any max_context works.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "baton/step_kernel.cuh"
#include "kernels/async_copy.cuh"
#include "kernels/attention/chunk_attention.h"
#include "kernels/attention/mma_softmax.cuh"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/gemv_body.cuh"
#include "kernels/tile.h"

namespace baton::detail::chunk {

inline constexpr int kWarps = kThreads / 32;
inline constexpr int kWarpRows = 16;  // query rows per warp: one mma's M
static_assert(kWarps * kWarpRows == kTileRows, "each warp owns 16 rows of the tile");
inline constexpr int kTileKeys = 64;  // keys per K/V tile: eight n-tiles of S, four k-steps of P·V
// Tiles in flight: while one is consumed the next two load, which keeps a
// decoding position's block (a long context, almost no math per tile) from
// paying a full memory round trip per tile. 112 KB for head_dim 128: two
// blocks per SM still fit.
inline constexpr int kStages = 3;
inline constexpr std::uint32_t kNoPosition = 0xffffffffu;

// 16-byte chunks per shared-memory row: the head's D / 8, padded to a
// multiple of 8 so that the swizzle (chunk ^ row % 8) stays inside the row
// and every row starts at bank 0. ldmatrix reads one chunk of 8 consecutive
// rows: swizzled, they lie in 8 distinct 16-byte bank groups (no conflict).
template <int D>
inline constexpr int kRowChunks = (D / 8 + 7) / 8 * 8;

template <int D>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  return row * kRowChunks<D> + (chunk ^ (row & 7));
}

// The block's work, found by the tile lookup (one thread writes it).
struct TileWork {
  std::uint32_t position;  // kNoPosition: none
  std::uint32_t tile;      // tile of the position's query rows
  std::uint32_t tokens;
  std::uint32_t first_row;
  std::uint32_t slot;
  std::int32_t start;
};

// The body's shared memory, provided by its caller (the op's dynamic shared
// memory). T only names the storage type the rows hold; the layout is in
// 16-byte chunks.
template <class T, int D>
struct ChunkAttentionShared {
  static_assert(D % 16 == 0 && D >= kMinHeadDim && D <= kMaxHeadDim,
                "head_dim must be a multiple of 16 in [16, 128]");
  // The tile's q rows; afterwards each warp stages its 16 output rows in its
  // own 16 q rows (16-byte stores to global memory instead of 4-byte ones).
  uint4 q[kTileRows * kRowChunks<D>];
  uint4 k[kStages][kTileKeys * kRowChunks<D>];
  uint4 v[kStages][kTileKeys * kRowChunks<D>];
  std::uint32_t warp_tiles[kWarps];  // the tile lookup's per-warp totals
  TileWork work;
};

template <class T, int D>
inline constexpr std::size_t kSharedBytes = sizeof(ChunkAttentionShared<T, D>);

// Returns f(std::integral_constant<int, D>{}) (a cudaError_t) for the head
// size D of an instantiation (a multiple of 16 in [kMinHeadDim,
// kMaxHeadDim]), else cudaErrorInvalidValue. Host and device: the op
// (ops/chunk_attention.h) picks its variant with it on either side.
#pragma nv_exec_check_disable
template <class F>
__host__ __device__ cudaError_t with_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 48:
      return f(std::integral_constant<int, 48>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 80:
      return f(std::integral_constant<int, 80>{});
    case 96:
      return f(std::integral_constant<int, 96>{});
    case 112:
      return f(std::integral_constant<int, 112>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// Maps block `target` (its grid x) to its (position, tile): the tiles of the
// live, in-range positions are numbered in position order, each position's
// from its last tile (the most keys) to its first, so the longest tiles
// start first. Every block scans the positions: a block-wide prefix sum of
// ceil(tokens * group / kTileRows), 128 positions per round (one round of
// L2-resident loads issued together with *active, then two barriers).
// Returns false (uniformly) when the block has no tile.
__device__ inline bool find_tile(const DecoderConfig& config, const ChunkAttentionBatch& batch,
                                 std::uint32_t group, std::uint32_t target,
                                 std::uint32_t (&warp_tiles)[kWarps], TileWork& work) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) work.position = kNoPosition;
  // Loads of p < capacity are always valid: issued before *active returns.
  const std::uint32_t active = *batch.active;
  std::uint32_t base = 0;  // tiles of the positions before this round
  for (std::uint32_t p0 = 0; p0 < batch.capacity && base <= target; p0 += kThreads) {
    const std::uint32_t p = p0 + threadIdx.x;
    std::uint32_t tokens = 0, first = 0, slot = 0, count = 0;
    std::int32_t start = -1;
    if (p < batch.capacity) {
      tokens = batch.tokens[p];
      first = batch.first_row[p];
      slot = batch.slots[p];
      start = batch.start[p];
    }
    if (p < active && tokens > 0 && slot < batch.max_slots && start >= 0 &&
        static_cast<unsigned long long>(start) + tokens <=
            static_cast<unsigned long long>(config.max_context) &&
        static_cast<unsigned long long>(first) + tokens <= batch.rows) {
      count = static_cast<std::uint32_t>(
          (static_cast<unsigned long long>(tokens) * group + kTileRows - 1) / kTileRows);
    }
    std::uint32_t inclusive = count;  // the warp's inclusive scan
#pragma unroll
    for (unsigned offset = 1; offset < 32; offset <<= 1) {
      const std::uint32_t other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    if (lane == 31) warp_tiles[warp] = inclusive;
    __syncthreads();
    std::uint32_t before = 0, total = 0;
#pragma unroll
    for (unsigned w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_tiles[w] : 0;
      total += warp_tiles[w];
    }
    const std::uint32_t first_tile = base + before + inclusive - count;
    if (count > 0 && target >= first_tile && target - first_tile < count) {
      work = TileWork{p, count - 1 - (target - first_tile), tokens, first, slot, start};
    }
    base += total;
    __syncthreads();  // warp_tiles is rewritten by the next round
  }
  __syncthreads();  // `work`, when no round ran
  return work.position != kNoPosition;
}

// The attention of this block's tile (see the file comment). qkv [rows,
// qkv_width], out [rows, attention_width]; grid chunk_attention_grid (or any
// grid whose x covers the live tiles), y = key/value head, kThreads threads;
// `tile` is the block's place in it, `shared` the caller's shared memory.
//
// The loop over key tiles is issue-bound next to its mmas, so its
// addressing is precomputed: every shared-memory address is a per-lane
// base XOR a compile-time offset plus an immediate (the swizzle flips only
// bits below the row, and 2kk + b = 2kk ^ b), the scale is folded into one
// FFMA per exp2, the row sums come from an mma of P with a ones operand, the
// mask is applied only on tiles that reach past the warp's first row, and O
// is rescaled only when a row max of the warp changed. (Addressing each
// fragment from (row, chunk) instead executed twice the instructions: H100,
// the 512-token chunk of 32/8 heads took 21.9 us instead of 19.5.)
template <class T, int D>
__device__ void chunk_attention_body(const DecoderConfig& config, const T* qkv, KvCacheLayer cache,
                                     const ChunkAttentionBatch& batch, T* out, Tile tile,
                                     ChunkAttentionShared<T, D>& shared) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a head row
  constexpr int kKSteps = D / 16;
  constexpr int kDTiles = D / 8;  // n-tiles of O
  constexpr int kKeyTiles = kTileKeys / 8;
  constexpr unsigned kRowBytes = kRowChunks<D> * 16;  // 128 or 256: the swizzle stays below it
  constexpr unsigned kStageBytes = kTileKeys * kRowBytes;
  constexpr int kLoads = kTileKeys * kChunks / kThreads;  // 16-byte loads per thread per tile
  static_assert(kTileKeys == kTileRows && kTileKeys * kChunks % kThreads == 0,
                "q and K/V tiles share one load pattern");
  // Everything this kernel reads (the batch, q, the chunk's own cache rows)
  // may come from the nodes before it: nothing before the wait. Every block
  // enters before it may return (no kernel ends before its predecessor).
  if (batch.launch_next_early) allow_next_node();
  wait_for_previous_nodes();
  if (!batch.launch_next_early) allow_next_node();

  const int group = config.group_size();
  if (!find_tile(config, batch, static_cast<std::uint32_t>(group), tile.x, shared.warp_tiles,
                 shared.work)) {
    return;
  }
  const TileWork work = shared.work;
  const int kv_head = static_cast<int>(tile.y);
  const int query_rows = static_cast<int>(work.tokens) * group;
  const int row0 = static_cast<int>(work.tile) * kTileRows;  // the tile's first query row
  const int tile_rows = min(kTileRows, query_rows - row0);
  const int start = work.start;
  // Keys [0, kv_end): the causal context of the tile's last token.
  const int kv_end = start + (row0 + tile_rows - 1) / group + 1;
  const int key_tiles = (kv_end + kTileKeys - 1) / kTileKeys;
  const std::size_t qkv_width = config.qkv_width();
  const std::size_t out_width = config.attention_width();
  const T* keys = static_cast<const T*>(cache.keys);
  const T* values = static_cast<const T*>(cache.values);
  // Query row r of the tile: its token's row and its head's column.
  const auto head_offset = [&](int r, std::size_t width) {
    const int qr = row0 + r;
    const int token = qr / group;
    return (work.first_row + token) * width +
           static_cast<std::size_t>(kv_head * group + qr - token * group) * D;
  };
  const unsigned q_base = shared_address(shared.q);
  const unsigned k_base = shared_address(shared.k[0]);
  const unsigned v_base = shared_address(shared.v[0]);

  // Load n of this thread: row i / kChunks, chunk i % kChunks of a tile.
  // q rows past the tile and keys past kv_end are zero-filled (their scores
  // are masked; zeros keep garbage such as NaN out of P·V).
#pragma unroll
  for (int n = 0; n < kLoads; ++n) {
    const int i = threadIdx.x + n * kThreads;
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < tile_rows;
    cp_async_16(q_base + r * kRowBytes + ((c ^ (r & 7)) << 4),
                valid ? qkv + head_offset(r, qkv_width) + c * 8 : qkv, valid);
  }
  const auto load_keys_values = [&](int tile, int stage) {
    const int limit = kv_end - tile * kTileKeys;  // rows of this tile in the context
    const unsigned stage_offset = stage * kStageBytes;
#pragma unroll
    for (int n = 0; n < kLoads; ++n) {
      const int i = threadIdx.x + n * kThreads;
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = r < limit;
      const unsigned to = stage_offset + r * kRowBytes + ((c ^ (r & 7)) << 4);
      // The row's place in the cache (dense or paged): key tile * 64 + r.
      const std::size_t from =
          valid ? decode::kv_row(config, cache, work.slot, kv_head, tile * kTileKeys + r) + c * 8
                : 0;
      cp_async_16(k_base + to, keys + from, valid);
      cp_async_16(v_base + to, values + from, valid);
    }
  };
  load_keys_values(0, 0);
  cp_async_commit();  // group 0: q and tile 0
#pragma unroll
  for (int s = 1; s < kStages - 1; ++s) {
    if (s < key_tiles) load_keys_values(s, s);
    cp_async_commit();  // one group per tile, empty or not: uniform wait counts
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int quad = lane % 4;           // the thread's column pair in an mma tile
  const int mrow = lane % 8;           // the row (mod 8) this lane addresses for ldmatrix
  const int matrix = lane / 8;         // the 8x8 matrix of an x4 ldmatrix it addresses
  const int wrow0 = warp * kWarpRows;  // the warp's first tile row
  // A warp whose rows all lie past the tile only helps load.
  const bool warp_works = wrow0 < tile_rows;
  // The thread's two rows (a: lane / 4, b: 8 below) and the last key each
  // attends (its own sequence position). Rows past the tile take the tile's
  // last key, so their softmax stays finite (they are never stored).
  const int row_a = wrow0 + lane / 4, row_b = row_a + 8;
  const int limit_a = row_a < tile_rows ? start + (row0 + row_a) / group : kv_end - 1;
  const int limit_b = row_b < tile_rows ? start + (row0 + row_b) / group : kv_end - 1;
  const int warp_first = start + (row0 + min(wrow0, tile_rows - 1)) / group;
  const int warp_last = start + (row0 + min(wrow0 + kWarpRows, tile_rows) - 1) / group;
  const float scale_log2 = rsqrtf(static_cast<float>(D)) * 1.4426950408889634f;
  // Per-lane ldmatrix offsets. Q's matrices: rows +0/+8 (matrix & 1), chunk
  // 2kk + (matrix >> 1). K's (S = Q·Kᵀ): n-tiles t/t+1 (matrix >> 1), chunk
  // 2kk + (matrix & 1). V's (transposed): keys +0/+8 (matrix & 1), chunk
  // t + (matrix >> 1). Every row addressed is = mrow mod 8.
  const unsigned lane_q =
      (wrow0 + mrow + (matrix & 1) * 8) * kRowBytes + (((matrix >> 1) ^ mrow) << 4);
  const unsigned lane_k = ((matrix >> 1) * 8 + mrow) * kRowBytes + (((matrix & 1) ^ mrow) << 4);
  const unsigned lane_v = ((matrix & 1) * 8 + mrow) * kRowBytes + (((matrix >> 1) ^ mrow) << 4);

  unsigned qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // P · ones: row a in [0], row b in [2]
  float m_a = -INFINITY, m_b = -INFINITY;    // running row maxima of the raw scores

  cp_async_wait<kStages - 2>();
  __syncthreads();  // q and tile 0 are in shared memory
  if (warp_works) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) ldmatrix_x4(qf[kk], q_base + (lane_q ^ (kk << 5)));
  }
  int read_stage = 0, write_stage = kStages - 1;
  for (int j = 0;;) {
    // Refill the stage consumed in iteration j - 1 (every thread is past it).
    if (j + kStages - 1 < key_tiles) load_keys_values(j + kStages - 1, write_stage);
    cp_async_commit();
    const int key0 = j * kTileKeys;
    if (warp_works && key0 <= warp_last) {
      const unsigned k_stage = k_base + read_stage * kStageBytes;
      const unsigned v_stage = v_base + read_stage * kStageBytes;
      float s[kKeyTiles][4];
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        const unsigned at = k_stage + (lane_k ^ (kk << 5));
#pragma unroll
        for (int t = 0; t < kKeyTiles; t += 2) {
          unsigned b[4];
          ldmatrix_x4(b, at + t * 8 * kRowBytes);
          decode::mma_16816<T>(s[t], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
          decode::mma_16816<T>(s[t + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
        }
      }
      // Keys past each row's own position, on tiles that reach past the
      // warp's first row (warp-uniform).
      if (key0 + kTileKeys - 1 > warp_first) {
#pragma unroll
        for (int t = 0; t < kKeyTiles; ++t) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = key0 + t * 8 + quad * 2 + e;
            if (key > limit_a) s[t][e] = -INFINITY;
            if (key > limit_b) s[t][2 + e] = -INFINITY;
          }
        }
      }
      // The row's 4 threads (a quad) hold its 64 scores; the maxima are
      // finite from the first tile on (key 0 is in every row's context).
      online_softmax_tile(s, m_a, m_b, o, sums, scale_log2, [](int) { return true; });
      // P = 2^((s - max) * scale) as hi + lo, both in the storage type (P's
      // error about u^2 instead of u), 16 keys at a time.
      const float shift_a = -m_a * scale_log2, shift_b = -m_b * scale_log2;
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        if (key0 + kk * 16 > warp_last) break;  // P is zero from here on
        unsigned hi[4], lo[4];  // A fragments: rows a, b of n-tile 2kk, then of 2kk + 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float(&st)[4] = s[2 * kk + h];
          split<T>(fast_exp2(fmaf(st[0], scale_log2, shift_a)),
                   fast_exp2(fmaf(st[1], scale_log2, shift_a)), hi[2 * h], lo[2 * h]);
          split<T>(fast_exp2(fmaf(st[2], scale_log2, shift_b)),
                   fast_exp2(fmaf(st[3], scale_log2, shift_b)), hi[2 * h + 1], lo[2 * h + 1]);
        }
        decode::mma_16816<T>(sums, hi[0], hi[1], hi[2], hi[3], kOnes<T>, kOnes<T>);
        decode::mma_16816<T>(sums, lo[0], lo[1], lo[2], lo[3], kOnes<T>, kOnes<T>);
        const unsigned at = v_stage + kk * 16 * kRowBytes;
#pragma unroll
        for (int t = 0; t < kDTiles; t += 2) {
          unsigned b[4];
          ldmatrix_x4_trans(b, at + (lane_v ^ (t << 4)));
          decode::mma_16816<T>(o[t], hi[0], hi[1], hi[2], hi[3], b[0], b[1]);
          decode::mma_16816<T>(o[t + 1], hi[0], hi[1], hi[2], hi[3], b[2], b[3]);
          decode::mma_16816<T>(o[t], lo[0], lo[1], lo[2], lo[3], b[0], b[1]);
          decode::mma_16816<T>(o[t + 1], lo[0], lo[1], lo[2], lo[3], b[2], b[3]);
        }
      }
    }
    if (++j == key_tiles) break;
    read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile j has landed, and every warp is done with tile j - 1
  }
  cp_async_wait<0>();  // only empty groups remain; leave none behind
  if (!warp_works) return;

  // O / l staged in the warp's own q rows (only this warp ever read them),
  // then stored 16 bytes at a time. Every column of P · ones is the row sum.
  const float inv_a = 1.0f / sums[0], inv_b = 1.0f / sums[2];
  char* staged = reinterpret_cast<char*>(shared.q);
  const unsigned stage_a = row_a * kRowBytes + ((lane / 4) << 4);  // row_a = lane / 4 mod 8
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) {
    const unsigned at = (stage_a ^ (t << 4)) + quad * 4;
    *reinterpret_cast<unsigned*>(staged + at) = pack<T>(o[t][0] * inv_a, o[t][1] * inv_a);
    *reinterpret_cast<unsigned*>(staged + at + 8 * kRowBytes) =
        pack<T>(o[t][2] * inv_b, o[t][3] * inv_b);
  }
  __syncwarp();
  for (int i = lane; i < kWarpRows * kChunks; i += 32) {
    const int r = wrow0 + i / kChunks, c = i % kChunks;
    if (r < tile_rows) {
      *reinterpret_cast<uint4*>(out + head_offset(r, out_width) + c * 8) =
          shared.q[swizzle<D>(r, c)];
    }
  }
}

}  // namespace baton::detail::chunk
