// The runtime's own GEMM for steps that hold many token rows (prefill
// chunks): the kernel body of ops/gemm.h, which every launch path runs.
// Internal; Abseil-free.
//
// y[r] = W · x[r] on tensor cores: a block computes a kM x kN tile of the
// output (token rows x output features) with mma.sync m16n8k16 (fp32
// accumulation), its warps each a kWarpM x kWarpN part. x and W tiles of kK
// columns stream through a cp.async pipeline of kStages shared-memory stages
// (16-byte copies, zero-filled past the live rows, past out_features and past
// in_features) and reach the tensor cores through ldmatrix. Rows of 16-byte
// chunks are XOR-swizzled so that both the copies and ldmatrix's 8-row
// phases touch eight distinct 16-byte bank groups (no bank conflicts).
//
// Row invariance: every output element is one accumulator that receives the
// mmas of k = 0, 16, 32, ... in that order, exactly ceil(in_features / 16)
// of them (a k step wholly past in_features is skipped, never added as
// zeros), whatever the tile shape, the capacity, *active or the other rows.
// An mma computes each element from its own row of A and column of B, so
// y[r] has the same bits in any batch and under any of the tile shapes below:
// the launcher may choose the tile from the batch's size.
//
// Programmatic dependent launch: the weight tiles of the first kStages - 1
// stages are requested before the wait for the previous node (weights are
// constant); x, *active and the residual are read only after it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton/config.h"
#include "kernels/async_copy.cuh"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/gemm_tiles.h"
#include "kernels/gemv_body.cuh"
#include "kernels/gemv_io.h"
#include "kernels/tile.h"

namespace baton::detail::decode {

// Byte offset of 16-byte chunk `chunk` of tile row `row`: rows of 64 bytes
// pair up into 128-byte lines (all 32 banks), so the XOR key changes every
// 128 / kRowBytes rows; 8 consecutive rows at one logical chunk, what a
// ldmatrix phase or a warp's copies touch, land in 8 distinct bank groups.
template <int Chunks>
__device__ __forceinline__ int gemm_swizzle(int row, int chunk) {
  constexpr int kRowsPerLine = 8 / Chunks;
  return row * Chunks * 16 + ((chunk ^ ((row / kRowsPerLine) % Chunks)) << 4);
}

// One thread's share of the copies of a Rows x kK tile of a row-major
// [*, in_features] matrix (x or W) into a swizzled stage: Rows * kChunks /
// kThreads chunks, all in the thread's chunk column, kThreads / kChunks rows
// apart (a multiple of 8: one swizzle key). Rows >= valid_rows and columns >=
// in_features become zeros. Set up once; each stage costs a compare and the
// copies.
template <class G, int Rows, class T>
struct GemmCopier {
  static constexpr int kCopies = Rows * G::kChunks / G::kThreads;
  static constexpr int kRowStep = G::kThreads / G::kChunks;
  static_assert(kCopies >= 1 && Rows * G::kChunks % G::kThreads == 0 && kRowStep % 8 == 0,
                "every thread copies whole chunks, one swizzle key");
  const T* base;   // the matrix (a valid address for the zero-filled copies)
  const T* first;  // the thread's first row at column chunk * 8
  int column;      // chunk * 8
  int in_features;
  unsigned dst;      // byte offset of the first chunk in the stage's tile
  unsigned rows_ok;  // bit j: row j of the thread's copies is in range

  __device__ __forceinline__ GemmCopier(const T* matrix, int row0, int valid_rows, int in_features_)
      : base(matrix), in_features(in_features_) {
    const int row = static_cast<int>(threadIdx.x) / G::kChunks;
    const int chunk = static_cast<int>(threadIdx.x) % G::kChunks;
    column = chunk * 8;
    first = matrix + static_cast<std::size_t>(row0 + row) * in_features + column;
    dst = static_cast<unsigned>(gemm_swizzle<G::kChunks>(row, chunk));
    rows_ok = 0;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      if (row0 + row + j * kRowStep < valid_rows) rows_ok |= 1u << j;
    }
  }

  // Columns [k0, k0 + kK) into the tile at shared address `tile`.
  __device__ __forceinline__ void operator()(unsigned tile, int k0) const {
    const bool k_ok = k0 + column < in_features;
#pragma unroll
    for (int j = 0; j < kCopies; ++j) {
      const bool ok = k_ok && (rows_ok >> j & 1u) != 0;
      const T* from = ok ? first + static_cast<std::size_t>(j) * kRowStep * in_features + k0 : base;
      cp_async_16(tile + dst + j * kRowStep * G::kRowBytes, from, ok);
    }
  }
};

// One output pair (columns col, col + 1 of row `row`; col + 1 may be past
// out_features): GemvOutput's semantics, y rounded once from sum + bias.
template <class T, GemvOutput Output>
__device__ __forceinline__ void gemm_write(const GemvIo& io, int out_features, bool paired, int row,
                                           int col, float v0, float v1, float b0, float b1) {
  const std::size_t at = static_cast<std::size_t>(row) * out_features + col;
  const bool second = col + 1 < out_features;
  if (io.bias != nullptr) {
    v0 += b0;
    v1 += b1;
  }
  const T r0 = Storage<T>::store(v0), r1 = Storage<T>::store(v1);
  if constexpr (Output == GemvOutput::kStore) {
    T* y = static_cast<T*>(io.y) + at;
    if (paired && second) {
      unsigned short lo, hi;
      memcpy(&lo, &r0, 2);
      memcpy(&hi, &r1, 2);
      *reinterpret_cast<unsigned*>(y) = lo | static_cast<unsigned>(hi) << 16;
    } else {
      y[0] = r0;
      if (second) y[1] = r1;
    }
  } else {
    float* h = io.residual + at;
    if (paired && second) {
      float2 old = *reinterpret_cast<const float2*>(h);
      old.x = old.x + Storage<T>::load(r0);
      old.y = old.y + Storage<T>::load(r1);
      *reinterpret_cast<float2*>(h) = old;
    } else {
      h[0] = h[0] + Storage<T>::load(r0);
      if (second) h[1] = h[1] + Storage<T>::load(r1);
    }
  }
}

// Grid (G::row_tiles(capacity), G::feature_tiles(out_features)) = tile,
// G::kThreads threads, `shared` = G::kSharedBytes of dynamic shared
// memory (128-byte aligned) from the caller. W [out_features, in_features],
// io.x [capacity, in_features] (16-byte aligned rows: in_features % 8 == 0).
//
// The main loop is software-pipelined: a warp requests the fragments of the
// next k step (of the next stage, after the stage's barrier, at the last step)
// before it issues the mmas of the current one, and the copies of the stage
// kStages - 1 ahead go out between, so ldmatrix, cp.async and the barrier
// overlap the tensor cores instead of preceding them.
template <class T, GemvOutput Output, class G>
__device__ __forceinline__ void gemm_body(const T* w, int out_features, int in_features,
                                          const GemvIo& io, DecodeBatch batch, Tile tile,
                                          char* shared) {
  constexpr int S = G::kStages;
  constexpr int kSteps = G::kK / 16;  // mma k steps per stage
  const int m0 = static_cast<int>(tile.x) * G::kM;
  const int n0 = static_cast<int>(tile.y) * G::kN;
  const int k_tiles = (in_features + G::kK - 1) / G::kK;
  const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const auto a_tile = [&](int stage) { return smem + stage * G::kStageBytes; };
  const auto b_tile = [&](int stage) {
    return smem + stage * G::kStageBytes + G::kM * G::kRowBytes;
  };
  // Weights are constant: the first stages' tiles are requested before the
  // previous node ends. They join the first commit group below.
  const GemmCopier<G, G::kN, T> copy_w(w, n0, out_features, in_features);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < k_tiles) copy_w(b_tile(s), s * G::kK);
  }
  const std::uint32_t active = enter_step_node_active(batch);
  const int rows = static_cast<int>(active < batch.capacity ? active : batch.capacity);
  if (m0 >= rows) {  // uniform across the block
    // The weight copies in flight must land before the block's shared
    // memory goes to another block.
    cp_async_commit();
    cp_async_wait<0>();
    return;
  }
  const GemmCopier<G, G::kM, T> copy_x(static_cast<const T*>(io.x), m0, rows, in_features);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < k_tiles) copy_x(a_tile(s), s * G::kK);
    cp_async_commit();
  }

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp_m = warp % G::kWarpsM, warp_n = warp / G::kWarpsM;
  // ldmatrix.x4 addresses: lane l names row l % 8 of matrix l / 8. A (x
  // rows): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) give a0..a3; B (W
  // rows): (k 0-7 | 8-15) x (features 0-7 | 8-15) give b0, b1 of two n8
  // tiles. The swizzle key of a row depends only on l % 8 here (tile rows
  // start at multiples of 8), and chunk 2kk + h XOR key = 2kk XOR (h XOR key).
  constexpr int C = G::kChunks;
  const int a_row = warp_m * G::kWarpM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int b_row = warp_n * G::kWarpN + (lane & 7) + (lane >> 4) * 8;
  const int a_key = (gemm_swizzle<C>(a_row, lane >> 4) >> 4) % C;
  const int b_key = (gemm_swizzle<C>(b_row, (lane >> 3) & 1) >> 4) % C;
  const int a_base = a_row * G::kRowBytes;
  const int b_base = b_row * G::kRowBytes;

  float acc[G::kMi][G::kNi][4];
#pragma unroll
  for (int i = 0; i < G::kMi; ++i) {
#pragma unroll
    for (int j = 0; j < G::kNi; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
  unsigned a[2][G::kMi][4], b[2][G::kNi][2];
  const auto load_fragments = [&](int stage, int kk, unsigned(&af)[G::kMi][4],
                                  unsigned(&bf)[G::kNi][2]) {
    const unsigned a_at = a_tile(stage) + a_base + (((2 * kk) ^ a_key) << 4);
    const unsigned b_at = b_tile(stage) + b_base + (((2 * kk) ^ b_key) << 4);
#pragma unroll
    for (int i = 0; i < G::kMi; ++i) ldmatrix_x4(af[i], a_at + i * 16 * G::kRowBytes);
#pragma unroll
    for (int j = 0; j < G::kNi / 2; ++j) {
      unsigned r[4];
      ldmatrix_x4(r, b_at + j * 16 * G::kRowBytes);
      bf[2 * j][0] = r[0];
      bf[2 * j][1] = r[1];
      bf[2 * j + 1][0] = r[2];
      bf[2 * j + 1][1] = r[3];
    }
  };

  // Stage groups: one per tile (empty past the last), so waiting for all
  // but the newest S - 2 groups waits for the next stage to land.
  cp_async_wait<S - 2>();
  __syncthreads();
  load_fragments(0, 0, a[0], b[0]);
  int read_stage = 0, write_stage = S - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    // k steps of this tile inside in_features (all but in the last tile).
    const int steps = (in_features - kt * G::kK + 15) / 16;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      if (kk == kSteps - 1) {
        // Tile kt + 1 has landed for every thread, and every thread has
        // requested its last fragments of the stage the copies below
        // overwrite next.
        cp_async_wait<S - 2>();
        __syncthreads();
        read_stage = read_stage + 1 == S ? 0 : read_stage + 1;
      }
      load_fragments(read_stage, (kk + 1) % kSteps, a[(kk + 1) % 2], b[(kk + 1) % 2]);
      if (kk == 0) {
        const int next = kt + S - 1;
        if (next < k_tiles) {
          copy_x(a_tile(write_stage), next * G::kK);
          copy_w(b_tile(write_stage), next * G::kK);
        }
        cp_async_commit();
        write_stage = write_stage + 1 == S ? 0 : write_stage + 1;
      }
      if (kk < steps) {  // uniform across the block
#pragma unroll
        for (int i = 0; i < G::kMi; ++i) {
#pragma unroll
          for (int j = 0; j < G::kNi; ++j) {
            mma_16816<T>(acc[i][j], a[kk % 2][i][0], a[kk % 2][i][1], a[kk % 2][i][2],
                         a[kk % 2][i][3], b[kk % 2][j][0], b[kk % 2][j][1]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups remain; leave none behind

  // Accumulator e of mma tile (i, j): row g (+ 8 for e >= 2), features 2c, 2c + 1.
  const int g = lane / 4, c = lane % 4;
  const bool paired = out_features % 2 == 0;  // pairs then stay 4 / 8-byte aligned
#pragma unroll
  for (int j = 0; j < G::kNi; ++j) {
    const int col = n0 + warp_n * G::kWarpN + j * 8 + 2 * c;
    if (col >= out_features) continue;
    float b0 = 0.0f, b1 = 0.0f;
    if (io.bias != nullptr) {
      b0 = load(static_cast<const T*>(io.bias), col);
      if (col + 1 < out_features) b1 = load(static_cast<const T*>(io.bias), col + 1);
    }
#pragma unroll
    for (int i = 0; i < G::kMi; ++i) {
      const int row = m0 + warp_m * G::kWarpM + i * 16 + g;
      if (row < rows) {
        gemm_write<T, Output>(io, out_features, paired, row, col, acc[i][j][0], acc[i][j][1], b0,
                              b1);
      }
      if (row + 8 < rows) {
        gemm_write<T, Output>(io, out_features, paired, row + 8, col, acc[i][j][2], acc[i][j][3],
                              b0, b1);
      }
    }
  }
}

}  // namespace baton::detail::decode
