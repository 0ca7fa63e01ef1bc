// The chunk attention kernel's body (EnqueueChunkAttention,
// kernels/chunk_attention.h): shared by the graph path (chunk_attention.cu)
// and a dynamic-parallelism step compiled into another device link, which
// pass it their own shared memory (ChunkAttentionShared). Internal;
// Abseil-free.
//
// FlashAttention-2 on tensor cores. A block serves one (position, key/value
// head) and a tile of kTileRows query rows of that position; a query row is a
// (token, query head of the group) pair, token-major (row = token * group +
// head in group), so the group's query heads share every K/V tile the block
// streams: K/V are read once per group, not once per query head, and a
// decoding token with group 4 is 4 query rows of one block. Each of the 4
// warps owns 16 rows: S = Q·Kᵀ and O = P·V with mma.sync m16n8k16 (fp32
// accumulation), an online softmax in fp32 in the log2 domain (exp2f with
// the 1/sqrt(head_dim) scale folded in), keys streamed in tiles of
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
#include "kernels/chunk_attention.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/gemv_body.cuh"

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
inline constexpr int kMinHeadDim = 16;
inline constexpr int kMaxHeadDim = 128;
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

// The body's shared memory, provided by its caller (a __global__ wrapper
// casts its dynamic shared memory to it). T only names the storage type the
// rows hold; the layout is in 16-byte chunks.
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

// cp.async of 16 bytes, zero-filled (nothing read) when !valid; `global`
// must still be a valid address.
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* shared) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* shared) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Two fp32 values rounded to the storage type, packed as an mma operand
// (the lower column in the low half), and the rounded values read back.
template <class T>
__device__ __forceinline__ unsigned pack_rounded(float lo, float hi, float& lo_r, float& hi_r) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    const float2 f = __half22float2(h);
    lo_r = f.x;
    hi_r = f.y;
    return *reinterpret_cast<const unsigned*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    const float2 f = __bfloat1622float2(h);
    lo_r = f.x;
    hi_r = f.y;
    return *reinterpret_cast<const unsigned*>(&h);
  }
}
template <class T>
__device__ __forceinline__ unsigned pack(float lo, float hi) {
  float a, b;
  return pack_rounded<T>(lo, hi, a, b);
}

// Maps this block (blockIdx.x) to its (position, tile): the tiles of the
// live, in-range positions are numbered in position order, each position's
// from its last tile (the most keys) to its first, so the longest tiles
// start first. Every block scans the positions: a block-wide prefix sum of
// ceil(tokens * group / kTileRows), 128 positions per round (one round of
// L2-resident loads issued together with *active, then two barriers).
// Returns false (uniformly) when the block has no tile.
__device__ inline bool find_tile(const DecoderConfig& config, const ChunkAttentionBatch& batch,
                                 std::uint32_t group, std::uint32_t (&warp_tiles)[kWarps],
                                 TileWork& work) {
  const std::uint32_t target = blockIdx.x;
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
// grid whose x covers the live tiles), y = key/value head, kThreads threads.
template <class T, int D>
__device__ void chunk_attention_body(const DecoderConfig& config, const T* qkv, KvCacheLayer cache,
                                     const ChunkAttentionBatch& batch, T* out,
                                     ChunkAttentionShared<T, D>& shared) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a head row
  constexpr int kKSteps = D / 16;
  constexpr int kDTiles = D / 8;  // n-tiles of O
  constexpr int kKeyTiles = kTileKeys / 8;
  // Everything this kernel reads (the batch, q, the chunk's own cache rows)
  // may come from the nodes before it: nothing before the wait. Every block
  // enters before it may return (no kernel ends before its predecessor).
  if (batch.launch_next_early) allow_next_node();
  wait_for_previous_nodes();
  if (!batch.launch_next_early) allow_next_node();

  const int group = config.group_size();
  if (!find_tile(config, batch, static_cast<std::uint32_t>(group), shared.warp_tiles, shared.work)) {
    return;
  }
  const TileWork work = shared.work;
  const int kv_head = blockIdx.y;
  const int query_rows = static_cast<int>(work.tokens) * group;
  const int row0 = static_cast<int>(work.tile) * kTileRows;  // the tile's first query row
  const int tile_rows = min(kTileRows, query_rows - row0);
  const int start = work.start;
  // Keys [0, kv_end): the causal context of the tile's last token.
  const int kv_end = start + (row0 + tile_rows - 1) / group + 1;
  const int key_tiles = (kv_end + kTileKeys - 1) / kTileKeys;
  const std::size_t qkv_width = config.qkv_width();
  const std::size_t out_width = config.attention_width();
  const T* keys = static_cast<const T*>(cache.keys) +
                  decode::cache_row(config, work.slot, kv_head, 0);
  const T* values = static_cast<const T*>(cache.values) +
                    decode::cache_row(config, work.slot, kv_head, 0);
  // Query row r of the tile: its token's row and its head's column.
  const auto head_offset = [&](int r, std::size_t width) {
    const int qr = row0 + r;
    const int token = qr / group;
    return (work.first_row + token) * width + static_cast<std::size_t>(kv_head * group + qr - token * group) * D;
  };

  // q rows past the tile and keys past kv_end are zero-filled (their scores
  // are masked; zeros keep garbage such as NaN out of P·V).
  for (int i = threadIdx.x; i < kTileRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < tile_rows;
    cp_async_16(&shared.q[swizzle<D>(r, c)], valid ? qkv + head_offset(r, qkv_width) + c * 8 : qkv,
                valid);
  }
  const auto load_keys_values = [&](int tile, int stage) {
    const int key0 = tile * kTileKeys;
    for (int i = threadIdx.x; i < kTileKeys * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = key0 + r < kv_end;
      const std::size_t at = valid ? static_cast<std::size_t>(key0 + r) * D + c * 8 : 0;
      cp_async_16(&shared.k[stage][swizzle<D>(r, c)], keys + at, valid);
      cp_async_16(&shared.v[stage][swizzle<D>(r, c)], values + at, valid);
    }
  };
  load_keys_values(0, 0);
  cp_async_commit();  // group 0: q and tile 0
#pragma unroll
  for (int s = 1; s < kStages - 1; ++s) {
    if (s < key_tiles) load_keys_values(s, s);
    cp_async_commit();  // always one group per tile slot, empty or not: uniform wait counts
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int quad = lane % 4;          // the thread's column pair in an mma tile
  const int mrow = lane % 8;          // the row this lane addresses for ldmatrix
  const int matrix = lane / 8;        // the 8x8 matrix of an x4 ldmatrix it addresses
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

  unsigned qf[kKSteps][4];
  float o[kDTiles][4];
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  // Running max (log2 units) and this thread's part of the row sums.
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  cp_async_wait<kStages - 2>();
  __syncthreads();  // q and tile 0 are in shared memory
  if (warp_works) {
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      ldmatrix_x4(qf[kk], &shared.q[swizzle<D>(wrow0 + mrow + (matrix & 1) * 8,
                                               2 * kk + (matrix >> 1))]);
    }
  }
  for (int j = 0;;) {
    // Refill the stage consumed in iteration j - 1 (every thread is past it).
    const int next = j + kStages - 1;
    if (next < key_tiles) load_keys_values(next, next % kStages);
    cp_async_commit();
    const int key0 = j * kTileKeys;
    if (warp_works && key0 <= warp_last) {
      const uint4* ks = shared.k[j % kStages];
      const uint4* vs = shared.v[j % kStages];
      float s[kKeyTiles][4];
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
        for (int t = 0; t < kKeyTiles; t += 2) {
          // Matrices: keys of n-tile t at d-chunks 2kk, 2kk+1, then n-tile t+1.
          unsigned b[4];
          ldmatrix_x4(b, &ks[swizzle<D>((t + (matrix >> 1)) * 8 + mrow, 2 * kk + (matrix & 1))]);
          decode::mma_16816<T>(s[t], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[0], b[1]);
          decode::mma_16816<T>(s[t + 1], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], b[2], b[3]);
        }
      }
      // Scale into log2 units and mask keys past each row's own position
      // (only tiles that reach past the warp's first row need it).
      const bool masked = key0 + kTileKeys - 1 > warp_first;
      float max_a = m_a, max_b = m_b;
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + t * 8 + quad * 2 + e;
          float xa = s[t][e] * scale_log2, xb = s[t][2 + e] * scale_log2;
          if (masked && key > limit_a) xa = -INFINITY;
          if (masked && key > limit_b) xb = -INFINITY;
          s[t][e] = xa;
          s[t][2 + e] = xb;
          max_a = fmaxf(max_a, xa);
          max_b = fmaxf(max_b, xb);
        }
      }
      // The row's 4 threads (a quad) hold its 64 scores.
      max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, 1));
      max_a = fmaxf(max_a, __shfl_xor_sync(0xffffffffu, max_a, 2));
      max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, 1));
      max_b = fmaxf(max_b, __shfl_xor_sync(0xffffffffu, max_b, 2));
      // Finite from the first tile on: key 0 is in every row's context.
      const float rescale_a = exp2f(m_a - max_a), rescale_b = exp2f(m_b - max_b);
      m_a = max_a;
      m_b = max_b;
      // P rounded to the storage type for the mma; the row sums add the
      // rounded values, so numerator and denominator use the same weights.
      unsigned p[kKeyTiles][2];
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int t = 0; t < kKeyTiles; ++t) {
        float r0, r1;
        p[t][0] = pack_rounded<T>(exp2f(s[t][0] - m_a), exp2f(s[t][1] - m_a), r0, r1);
        sum_a += r0 + r1;
        p[t][1] = pack_rounded<T>(exp2f(s[t][2] - m_b), exp2f(s[t][3] - m_b), r0, r1);
        sum_b += r0 + r1;
      }
      l_a = l_a * rescale_a + sum_a;
      l_b = l_b * rescale_b + sum_b;
#pragma unroll
      for (int t = 0; t < kDTiles; ++t) {
        o[t][0] *= rescale_a;
        o[t][1] *= rescale_a;
        o[t][2] *= rescale_b;
        o[t][3] *= rescale_b;
      }
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        if (key0 + kk * 16 > warp_last) break;  // P is zero from here on
#pragma unroll
        for (int t = 0; t < kDTiles; t += 2) {
          // Matrices (transposed): keys 16kk..+7 and +8..+15 of d-chunk t, then t+1.
          unsigned b[4];
          ldmatrix_x4_trans(b, &vs[swizzle<D>(kk * 16 + mrow + (matrix & 1) * 8,
                                              t + (matrix >> 1))]);
          decode::mma_16816<T>(o[t], p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0],
                               p[2 * kk + 1][1], b[0], b[1]);
          decode::mma_16816<T>(o[t + 1], p[2 * kk][0], p[2 * kk][1], p[2 * kk + 1][0],
                               p[2 * kk + 1][1], b[2], b[3]);
        }
      }
    }
    if (++j == key_tiles) break;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile j has landed, and every warp is done with tile j - 1
  }
  cp_async_wait<0>();  // only empty groups remain; leave none behind
  if (!warp_works) return;

  // The row sums over the quad (a fixed butterfly: the same bits in all
  // four threads), then O / l staged in the warp's own q rows (only this
  // warp ever read them) and stored 16 bytes at a time.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = 1.0f / l_a, inv_b = 1.0f / l_b;
  unsigned* staged = reinterpret_cast<unsigned*>(shared.q);
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) {
    staged[swizzle<D>(row_a, t) * 4 + quad] = pack<T>(o[t][0] * inv_a, o[t][1] * inv_a);
    staged[swizzle<D>(row_b, t) * 4 + quad] = pack<T>(o[t][2] * inv_b, o[t][3] * inv_b);
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
