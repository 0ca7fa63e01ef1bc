// The wide GEMV (ops/wide_gemv.h): the kernel body, for decode buckets
// of 9 to 64 positions, where the GEMV of gemv_body.cuh reads every weight
// once per tile of 8 positions. Internal; Abseil-free.
//
// A block owns 128 weight rows (a 16-row mma tile per warp) and every
// position of its tile (P = 8 * NT, up to 64), so each weight is read from
// memory once, by one thread, whatever the bucket. The cluster's blocks
// (gridDim.z = split) take contiguous ranges of K. Inputs are shared by the
// block's eight warps: each chunk of 128 elements of every position is
// copied into shared memory once (cp.async, no registers held: staging
// through registers made ptxas spill the staged vectors at tiles of 64;
// rows 320 bytes apart, so the two positions a quarter warp reads sit in
// different bank halves) while the warps stream their rows' weights, 16-byte
// loads a chunk ahead, into mma.sync m16n8k16
// (fp32 accumulation, k permuted inside each 32-element k-block exactly as
// gemv_body.cuh does, so both operands keep 16-byte loads).
//
// The cluster's partial sums meet in a reduce-scatter over distributed
// shared memory: every block parks its [128 rows x P] sums, and rank r adds
// the blocks' sums of its 128 / split rows in rank order and writes them.
//
// Bits: an output element is, per rank in order, the one accumulator of its
// warp over the rank's k-blocks in order. The split is a function of the
// shape alone (wide_gemv_split), and an mma computes each column from its
// own inputs, so an element's bits depend on neither the bucket, *active
// nor the other positions (batch invariant across the buckets this kernel
// serves); they are not gemv_body.cuh's, whose warps split K instead.
//
// Programmatic dependent launch: the first chunk's weights are requested
// before the wait (weights are constant); inputs, the residual stream and
// *active are read after it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton/config.h"
#include "kernels/async_copy.cuh"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/gemv_body.cuh"
#include "kernels/gemv_io.h"
#include "kernels/tile.h"

namespace baton::detail::decode {

// A block's shared memory (the caller declares it: one body for every launch
// path): two staged chunks of every position's inputs, then, once the K loop
// is done, the block's sums [row][position] (rows padded by 8 floats, so a
// half warp's 8-byte stores of 4 rows x 4 column pairs hit 32 banks).
template <int NT>
struct WideGemvShared {
  static constexpr int kPositions = NT * kMmaPositions;
  static constexpr int kTileStride = kPositions + 8;
  union {
    uint4 stage[2][kPositions * kWideStride / kVector];
    float tile[kWideRows * kTileStride];
  };
};

template <class T, GemvOutput Output, int NT>
__device__ __forceinline__ void wide_gemv_body(const T* w, int out_features, int in_features,
                                               GemvIo io, DecodeBatch batch, Tile tile,
                                               WideGemvShared<NT>& shared) {
  // The block's 128 rows (64 gate|up pairs) are row block tile.x, its
  // positions tile tile.y; its K range is its cluster rank's.
  constexpr int P = NT * kMmaPositions;
  constexpr int kTileStride = WideGemvShared<NT>::kTileStride;
  constexpr bool kSilu = Output == GemvOutput::kSiluMul;
  // Staged vectors (8 elements) per thread and chunk: P rows of 16.
  constexpr int kVectorsPerRow = kWideChunk / kVector;
  constexpr int kStageVectors = (P * kVectorsPerRow + kWideThreads - 1) / kWideThreads;
  const cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4;  // rows g and g + 8 of A, column g of B
  const int c = lane % 4;  // elements 8c..8c+7 of each k-block
  const int half = out_features / 2;
  const int out_width = kSilu ? half : out_features;
  const int block_out0 = static_cast<int>(tile.x) * wide_block_outputs(Output);
  const int row0 = block_out0 + warp * (kSilu ? kMmaRows / 2 : kMmaRows);
  const int a_index = row0 + g;
  const int b_index = kSilu ? half + row0 + g : row0 + g + 8;
  const bool a_ok = a_index < out_width;
  const bool b_ok = kSilu ? a_ok : b_index < out_features;
  const T* a_row = w + static_cast<std::size_t>(a_ok ? a_index : 0) * in_features + 8 * c;
  const T* b_row = w + static_cast<std::size_t>(b_ok ? b_index : 0) * in_features + 8 * c;
  // This block's k-blocks [kb_begin, kb_end), in chunks of kWideChunkBlocks.
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  const int kb_begin = rank * k_blocks / split;
  const int kb_end = (rank + 1) * k_blocks / split;
  const int chunks = (kb_end - kb_begin + kWideChunkBlocks - 1) / kWideChunkBlocks;
  const auto k_ok = [&](int kb) { return kb < kb_end && kb * kMmaK + 8 * c < in_features; };

  uint4 wa[kWideChunkBlocks], wb[kWideChunkBlocks], na[kWideChunkBlocks], nb[kWideChunkBlocks];
  const auto load_weights = [&](int chunk, uint4(&a)[kWideChunkBlocks],
                                uint4(&b)[kWideChunkBlocks]) {
#pragma unroll
    for (int j = 0; j < kWideChunkBlocks; ++j) {
      const int kb = kb_begin + chunk * kWideChunkBlocks + j;
      const bool ok = k_ok(kb);
      a[j] = a_ok && ok ? __ldcs(reinterpret_cast<const uint4*>(a_row + kb * kMmaK)) : uint4{};
      b[j] = b_ok && ok ? __ldcs(reinterpret_cast<const uint4*>(b_row + kb * kMmaK)) : uint4{};
    }
  };
  // Weights are constant: the first chunk's are requested before the wait.
  // (Requesting two chunks there made ptxas spill 72-128 bytes a thread at
  // tiles of 32 and 64.)
  load_weights(0, wa, wb);

  const std::uint32_t active = enter_step_node_active(batch);
  const std::uint32_t p0 = tile.y * P;
  if (p0 >= active) return;  // uniform across the cluster (it spans z only)

  // A chunk's inputs into a staging buffer, copied asynchronously (no
  // registers held): vector v of the block is position v / 16, elements
  // 8 (v % 16).. of the chunk; zeros past the live positions and this
  // block's K.
  const T* x = static_cast<const T*>(io.x);
  const auto stage_inputs = [&](int chunk) {
    const int k0 = (kb_begin + chunk * kWideChunkBlocks) * kMmaK;
    const int k_end = min(kb_end * kMmaK, in_features);
#pragma unroll
    for (int i = 0; i < kStageVectors; ++i) {
      const int v = tid + i * kWideThreads;
      const int pos = v / kVectorsPerRow;
      const int k = k0 + (v % kVectorsPerRow) * kVector;
      if (v < P * kVectorsPerRow) {
        const bool valid = p0 + pos < active && k < k_end;
        cp_async_16(
            static_cast<unsigned>(__cvta_generic_to_shared(
                &shared.stage[chunk & 1][pos * (kWideStride / kVector) + v % kVectorsPerRow])),
            valid ? x + (p0 + pos) * std::size_t(in_features) + k : x, valid);
      }
    }
    cp_async_commit();
  };
  stage_inputs(0);
  cp_async_wait<0>();
  __syncthreads();

  float d[NT][4] = {};
  for (int chunk = 0; chunk < chunks; ++chunk) {
    // wa, wb hold this chunk's weights; the next chunk's weights (na, nb)
    // and inputs are requested first. The staging buffer they go to was
    // last read in the previous chunk, before its barrier.
    const bool more = chunk + 1 < chunks;
    if (more) {
      load_weights(chunk + 1, na, nb);
      stage_inputs(chunk + 1);
    }
    const uint4* staged = shared.stage[chunk & 1];
#pragma unroll
    for (int j = 0; j < kWideChunkBlocks; ++j) {
      if (kb_begin + chunk * kWideChunkBlocks + j < kb_end) {  // uniform across the block
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 xv =
              staged[((nt * kMmaPositions + g) * kWideStride + j * kMmaK) / kVector + c];
          mma_16816<T>(d[nt], wa[j].x, wb[j].x, wa[j].y, wb[j].y, xv.x, xv.y);
          mma_16816<T>(d[nt], wa[j].z, wb[j].z, wa[j].w, wb[j].w, xv.z, xv.w);
        }
      }
    }
    if (more) {
      cp_async_wait<0>();
#pragma unroll
      for (int j = 0; j < kWideChunkBlocks; ++j) {
        wa[j] = na[j];
        wb[j] = nb[j];
      }
    }
    __syncthreads();  // the chunk is read; the next one is staged
  }

  // d[nt][0..1]: row g, positions 2c, 2c + 1 of tile nt; d[nt][2..3]: row g + 8.
  const int tile_row = warp * kMmaRows + g;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int col = nt * kMmaPositions + 2 * c;
    *reinterpret_cast<float2*>(&shared.tile[tile_row * kTileStride + col]) =
        make_float2(d[nt][0], d[nt][1]);
    *reinterpret_cast<float2*>(&shared.tile[(tile_row + 8) * kTileStride + col]) =
        make_float2(d[nt][2], d[nt][3]);
  }
  if (split > 1) {
    cluster.sync();  // every block's sums are parked
  } else {
    __syncthreads();
  }
  // The sum of tile element i over the cluster's blocks, in rank order (a
  // block of an unsplit launch is in no cluster: its own sums). The remote
  // loads are issued together: one round trip, not one per rank.
  const auto total = [&](int i) {
    if (split == 1) return shared.tile[i];
    float part[kWideMaxSplit];
#pragma unroll
    for (int q = 0; q < kWideMaxSplit; ++q) {
      part[q] = q < split ? *cluster.map_shared_rank(&shared.tile[i], q) : 0.0f;
    }
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < kWideMaxSplit; ++q) {
      if (q < split) sum += part[q];
    }
    return sum;
  };
  const int rows_per_rank = kWideRows / split;
  const int first_row = rank * rows_per_rank;
  if constexpr (kSilu) {
    // Pair e: gate row 16 m + gg of the tile and its up row 16 m + gg + 8.
    const int pairs = rows_per_rank / 2;
#pragma unroll 1
    for (int e = tid; e < pairs * P; e += kWideThreads) {
      const int pair = e / P, pos = e % P;
      const int m = first_row / kMmaRows + pair / 8, gg = pair % 8;
      const int out = block_out0 + m * 8 + gg;
      if (out < half && p0 + pos < active) {
        const float gate =
            Storage<T>::load(Storage<T>::store(total((m * kMmaRows + gg) * kTileStride + pos)));
        const float up =
            Storage<T>::load(Storage<T>::store(total((m * kMmaRows + gg + 8) * kTileStride + pos)));
        store(static_cast<T*>(io.y), (p0 + pos) * std::size_t(half) + out, silu_mul(gate, up));
      }
    }
  } else {
#pragma unroll 1
    for (int e = tid; e < rows_per_rank * P; e += kWideThreads) {
      const int row = first_row + e / P, pos = e % P;
      const int out = block_out0 + row;
      if (out < out_features && p0 + pos < active) {
        float sum = total(row * kTileStride + pos);
        if (io.bias != nullptr) sum += load(static_cast<const T*>(io.bias), out);
        const std::size_t at = (p0 + pos) * std::size_t(out_features) + out;
        if constexpr (Output == GemvOutput::kStore) {
          store(static_cast<T*>(io.y), at, sum);
        } else {
          io.residual[at] += Storage<T>::load(Storage<T>::store(sum));
        }
      }
    }
  }
  if (split > 1) cluster.sync();  // no block leaves while another reads its sums
}

}  // namespace baton::detail::decode
