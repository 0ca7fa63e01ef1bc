// The runtime's own GEMV (DecoderGemm::kBatonGemv): the kernel body, shared by
// the graph path (decode_kernels.cu) and the dynamic-parallelism step
// (src/dynamic_parallelism/dp_decoder_step.cu). Internal; Abseil-free.
//
// GEMV on tensor cores: a block computes 16 weight rows x 8 positions with
// mma.sync m16n8k16 (fp32 accumulation); its 8 warps split the row's
// 32-element k-blocks round robin, each with kMmaUnroll k-blocks of 16-byte
// loads in flight (the first issued before the previous node ends: weights
// are constant), and the block adds the warps' partials in warp order. A
// position's result is one column of the mma, computed from its own inputs
// in a fixed order whatever the other columns hold: the same bits for any
// batch, bucket or position (batch invariance). k inside a k-block is
// permuted the same way for weights and inputs (lane c holds the 8
// consecutive elements 8c..8c+7, split between the two mmas), which leaves
// the dot product unchanged and keeps every load 16 bytes.

#pragma once

#include <cstdint>
#include <type_traits>

#include "baton/config.h"
#include "decode_kernel_common.cuh"

namespace baton::detail::decode {

inline constexpr int kMmaRows = 16;
inline constexpr int kMmaPositions = 8;
inline constexpr int kMmaWarps = 8;
inline constexpr int kMmaK = 32;  // elements of a row per k-block (two mmas)
inline constexpr int kMmaUnroll = 4;
inline constexpr int kMmaMaxSplit = 8;        // blocks of a cluster (portable size)
inline constexpr int kMmaTargetBlocks = 264;  // two per SM of an H100/H200

enum class GemvInput { kPlain, kGated };

// How many blocks (one cluster) split the K of a [out_features, in_features]
// weight: short, wide weights (few row blocks, long rows) split K so that
// about two blocks per SM stream them. A function of the shape alone, never
// of the batch (batch invariance).
[[nodiscard]] BATON_HOST_DEVICE constexpr int gemv_split(int out_features, int in_features) {
  const int row_blocks = (out_features + kMmaRows - 1) / kMmaRows;
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  const int wanted = kMmaTargetBlocks / row_blocks;
  int split = wanted < 1 ? 1 : wanted > kMmaMaxSplit ? kMmaMaxSplit : wanted;
  while (split > 1 && split * kMmaWarps > k_blocks) --split;
  return split;
}

// d += A (16x16, row-major) * B (16x8, col-major), fp32 accumulation.
template <class T>
__device__ void mma_16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                          unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Element vector v of position p's input: x itself, or silu(gate) * up of a
// gate | up row rounded to the storage type (what EnqueueSiluMul writes).
template <class T, GemvInput Input>
__device__ Packed<T, kVector> gemv_input(const T* x, int in_features, std::uint32_t p, int v) {
  if constexpr (Input == GemvInput::kPlain) {
    return load_packed<T, kVector>(x + static_cast<std::size_t>(p) * in_features + v * kVector);
  } else {
    const T* row = x + static_cast<std::size_t>(p) * 2 * in_features;
    const auto g = load_packed<T, kVector>(row + v * kVector);
    const auto u = load_packed<T, kVector>(row + in_features + v * kVector);
    float o[kVector];
#pragma unroll
    for (int e = 0; e < kVector; ++e) o[e] = g[e] / (1.0f + __expf(-g[e])) * u[e];
    Packed<T, kVector> r;
    T* re = reinterpret_cast<T*>(&r.bits);
#pragma unroll
    for (int e = 0; e < kVector; ++e) re[e] = Storage<T>::store(o[e]);
    return r;
  }
}

// Grid (row blocks, position blocks, split), kMmaWarps * 32 threads, clusters
// of (1, 1, split) blocks: set at launch time on the graph path, compiled in
// with __cluster_dims__ for device launches (gemv_split gives the split).
template <class T, GemvInput Input>
__device__ __forceinline__ void gemv_body(const T* w, int out_features, int in_features, const T* x,
                                          DecodeBatch batch, T* y) {
  __shared__ float partial[kMmaWarps][kMmaRows * kMmaPositions];
  __shared__ float block_sum[kMmaRows * kMmaPositions];
  const cg::cluster_group cluster = cg::this_cluster();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // row g and g + 8 of A, column g of B
  const int c = lane % 4;  // elements 8c..8c+7 of each k-block
  // The cluster's blocks split the k-blocks of the same rows and positions.
  const int first = static_cast<int>(cluster.block_rank()) * kMmaWarps + warp;
  const int stride = static_cast<int>(cluster.num_blocks()) * kMmaWarps;
  const int row0 = blockIdx.x * kMmaRows;
  const bool a_ok = row0 + g < out_features;
  const bool b_ok = row0 + g + 8 < out_features;
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  const T* a_row = w + static_cast<std::size_t>(a_ok ? row0 + g : 0) * in_features + 8 * c;
  const T* b_row = w + static_cast<std::size_t>(b_ok ? row0 + g + 8 : 0) * in_features + 8 * c;
  uint4 wa[kMmaUnroll], wb[kMmaUnroll];
  const auto load_weights = [&](int kb0) {
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      const int kb = kb0 + j * stride;
      const bool k_ok = kb < k_blocks && kb * kMmaK + 8 * c < in_features;
      wa[j] = a_ok && k_ok ? *reinterpret_cast<const uint4*>(a_row + kb * kMmaK) : uint4{};
      wb[j] = b_ok && k_ok ? *reinterpret_cast<const uint4*>(b_row + kb * kMmaK) : uint4{};
    }
  };
  load_weights(first);
  const std::uint32_t active = enter_step_node_active(batch);
  const std::uint32_t p0 = blockIdx.y * kMmaPositions;
  if (p0 >= active) return;  // uniform across the cluster
  const std::uint32_t p = p0 + g;
  const bool p_ok = p < active;
  float d[4] = {};
  for (int kb0 = first; kb0 < k_blocks; kb0 += kMmaUnroll * stride) {
    if (kb0 != first) load_weights(kb0);
    uint4 xv[kMmaUnroll];
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      const int kb = kb0 + j * stride;
      const int k = kb * kMmaK + 8 * c;
      xv[j] = p_ok && kb < k_blocks && k < in_features
                  ? gemv_input<T, Input>(x, in_features, p, k / kVector).bits
                  : uint4{};
    }
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      if (kb0 + j * stride < k_blocks) {  // uniform across the warp
        mma_16816<T>(d, wa[j].x, wb[j].x, wa[j].y, wb[j].y, xv[j].x, xv[j].y);
        mma_16816<T>(d, wa[j].z, wb[j].z, wa[j].w, wb[j].w, xv[j].z, xv[j].w);
      }
    }
  }
  // d0, d1: row g, columns 2c, 2c + 1; d2, d3: row g + 8.
  partial[warp][g * kMmaPositions + 2 * c] = d[0];
  partial[warp][g * kMmaPositions + 2 * c + 1] = d[1];
  partial[warp][(g + 8) * kMmaPositions + 2 * c] = d[2];
  partial[warp][(g + 8) * kMmaPositions + 2 * c + 1] = d[3];
  __syncthreads();
  const int i = threadIdx.x;
  if (i < kMmaRows * kMmaPositions) {
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) sum += partial[v][i];
    block_sum[i] = sum;
  }
  cluster.sync();
  if (cluster.block_rank() == 0 && i < kMmaRows * kMmaPositions) {
    float total = 0.0f;
    for (unsigned r = 0; r < cluster.num_blocks(); ++r)
      total += *cluster.map_shared_rank(&block_sum[i], r);
    const int row = row0 + i / kMmaPositions;
    const std::uint32_t n = p0 + i % kMmaPositions;
    if (row < out_features && n < active) {
      store(y, static_cast<std::size_t>(n) * out_features + row, total);
    }
  }
  cluster.sync();  // every block's sums stay readable until block 0 is done
}

}  // namespace baton::detail::decode
