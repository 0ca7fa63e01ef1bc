// The runtime's own GEMV (DecoderGemm::kBatonGemv): the body of ops/gemv.h,
// which every launch path runs. Internal; Abseil-free.
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
//
// Fusions (each removes a row kernel, a whole dependent node, from the step):
// the input may be SiLU·mul of a gate | up row or the RMSNorm of the fp32
// residual stream (each block recomputes the norm's scale of its positions,
// a warp per position, in a fixed order), and the output may be added to the
// residual stream instead of stored (hidden += y rounded to the storage
// type, exactly what the residual-add kernel does with a stored y) or, for a
// gate | up weight, be SiLU(gate) * up: the block's mma rows 0-7 are gate
// rows and rows 8-15 the matching up rows, so each activation is made once,
// from the two rounded sums, by the block that has both.

#pragma once

#include <cstdint>
#include <cub/warp/warp_reduce.cuh>
#include <type_traits>

#include "baton/config.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/gemv_io.h"
#include "kernels/gemv_shape.h"
#include "kernels/tile.h"

namespace baton::detail::decode {

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

// One k-vector (8 elements) of a position's input as loaded, before the
// elementwise work that turns it into the mma's operand (gemv_operand): the
// loads are issued first, all together, and for the normed inputs the same
// round of loads also feeds the norm's sum of squares.
struct GemvRaw {
  uint4 a{}, b{};  // x | gate, up | hidden[0..3], hidden[4..7] | embedding row
};

// The embedding row of position p, or null for a token outside the table.
template <class T>
__device__ const T* embedding_row(const GemvIo& io, int in_features, std::uint32_t p) {
  const std::int32_t token = io.tokens[p];
  return token >= 0 && token < io.vocab
             ? static_cast<const T*>(io.embedding) + static_cast<std::size_t>(token) * in_features
             : nullptr;
}

template <class T, GemvInput Input>
__device__ GemvRaw gemv_load(const GemvIo& io, int in_features, std::uint32_t p, const T* row,
                             int k) {
  GemvRaw r;
  if constexpr (Input == GemvInput::kPlain) {
    r.a = *reinterpret_cast<const uint4*>(static_cast<const T*>(io.x) +
                                          static_cast<std::size_t>(p) * in_features + k);
  } else if constexpr (Input == GemvInput::kGated) {
    const T* gate_up = static_cast<const T*>(io.x) + static_cast<std::size_t>(p) * 2 * in_features;
    r.a = *reinterpret_cast<const uint4*>(gate_up + k);
    r.b = *reinterpret_cast<const uint4*>(gate_up + in_features + k);
  } else if constexpr (Input == GemvInput::kRmsNorm) {
    // p is the input row here (DecodeBatch::rows, resolved by the caller).
    const uint4* h =
        reinterpret_cast<const uint4*>(io.hidden + static_cast<std::size_t>(p) * in_features + k);
    r.a = h[0];
    r.b = h[1];
  } else {
    if (row != nullptr) r.a = *reinterpret_cast<const uint4*>(row + k);
  }
  return r;
}

// The mma operand from a loaded vector: x itself, silu(gate) * up rounded to
// the storage type (what ops::SiluMul writes), or x * scale * norm rounded
// (what the RMSNorm row kernel writes for the same scale).
template <class T, GemvInput Input>
__device__ uint4 gemv_operand(const GemvRaw& r, const uint4& norm, float scale) {
  if constexpr (Input == GemvInput::kPlain) {
    return r.a;
  } else {
    float o[kVector];
    if constexpr (Input == GemvInput::kGated) {
      const Packed<T, kVector> g{r.a}, u{r.b};
#pragma unroll
      for (int e = 0; e < kVector; ++e) o[e] = silu_mul(g[e], u[e]);
    } else {
      float x[kVector];
      if constexpr (Input == GemvInput::kRmsNorm) {
        const float f[kVector] = {__uint_as_float(r.a.x), __uint_as_float(r.a.y),
                                  __uint_as_float(r.a.z), __uint_as_float(r.a.w),
                                  __uint_as_float(r.b.x), __uint_as_float(r.b.y),
                                  __uint_as_float(r.b.z), __uint_as_float(r.b.w)};
#pragma unroll
        for (int e = 0; e < kVector; ++e) x[e] = f[e];
      } else {
        const Packed<T, kVector> e8{r.a};
#pragma unroll
        for (int e = 0; e < kVector; ++e) x[e] = e8[e];
      }
      const Packed<T, kVector> w{norm};
#pragma unroll
      for (int e = 0; e < kVector; ++e) o[e] = x[e] * scale * w[e];
    }
    Packed<T, kVector> out;
    T* oe = reinterpret_cast<T*>(&out.bits);
#pragma unroll
    for (int e = 0; e < kVector; ++e) oe[e] = Storage<T>::store(o[e]);
    return out.bits;
  }
}

inline constexpr int kNormBatch = 4;  // vectors per lane in flight in rms_scale

// RMSNorm scale of position p's input row (the residual stream, or its
// embedding row, which the first row block also stores as the residual
// stream): one warp; lane l sums vectors l, l + 32, ... in order, kNormBatch
// of them loaded at a time (all in flight before any is used: a d_model 1024
// row is one round trip), then a CUB warp sum (a fixed order whatever the
// batch). Valid in lane 0.
template <class T, GemvInput Input>
__device__ float rms_scale(const GemvIo& io, int in_features, std::uint32_t p, const T* row,
                           bool store_embedded, int lane,
                           cub::WarpReduce<float>::TempStorage& temp) {
  using WarpReduce = cub::WarpReduce<float>;
  const int vectors = in_features / kVector;
  float sum = 0.0f;
  for (int v0 = lane; v0 < vectors; v0 += kNormBatch * 32) {
    Floats8 x[kNormBatch];
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int v = v0 + j * 32;
      if constexpr (Input == GemvInput::kRmsNorm) {
        x[j] =
            v < vectors
                ? load_floats8(io.hidden + static_cast<std::size_t>(p) * in_features + v * kVector)
                : Floats8{};
      } else {
        const auto e8 = row != nullptr && v < vectors ? load_packed<T, kVector>(row + v * kVector)
                                                      : zero_packed<T, kVector>();
#pragma unroll
        for (int e = 0; e < kVector; ++e) x[j].v[e] = e8[e];
      }
    }
#pragma unroll
    for (int j = 0; j < kNormBatch; ++j) {
      const int v = v0 + j * 32;
      if (v >= vectors) break;
      if constexpr (Input == GemvInput::kEmbeddingRmsNorm) {
        if (store_embedded) {
          store_floats8(io.embedded + static_cast<std::size_t>(p) * in_features + v * kVector,
                        x[j]);
        }
      }
#pragma unroll
      for (int e = 0; e < kVector; ++e) sum += x[j].v[e] * x[j].v[e];
    }
  }
  sum = WarpReduce(temp).Sum(sum);
  return rsqrtf(sum / in_features + io.rms_epsilon);
}

// The GEMV's shared memory (its caller provides it).
struct GemvShared {
  float partial[kMmaWarps][kMmaRows * kMmaPositions];
  // Block 0's: the other blocks' sums (split K), [rank][output element].
  float incoming[kMmaMaxSplit][kMmaRows * kMmaPositions];
  float norm_scale[kMmaPositions];
  cub::WarpReduce<float>::TempStorage reduce[kMmaWarps];  // the RMSNorm scales' sums
};

// Grid (row blocks, position blocks, split) = tile, kMmaWarps * 32 threads,
// clusters of (1, 1, split) blocks: set at launch time on the graph path,
// compiled in with __cluster_dims__ for device launches (gemv_split gives the
// split).
template <class T, GemvInput Input, GemvOutput Output>
__device__ __forceinline__ void gemv_body(const T* w, int out_features, int in_features, GemvIo io,
                                          DecodeBatch batch, Tile tile, GemvShared& shared) {
  static_assert(kMmaWarps == kMmaPositions, "a warp per position computes the RMSNorm scales");
  constexpr bool kNormed = normed_input(Input);
  auto& partial = shared.partial;
  auto& incoming = shared.incoming;
  auto& norm_scale = shared.norm_scale;
  const cg::cluster_group cluster = cg::this_cluster();
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // row g and g + 8 of A, column g of B
  const int c = lane % 4;  // elements 8c..8c+7 of each k-block
  // The cluster's blocks split the k-blocks of the same rows and positions.
  const int first = static_cast<int>(cluster.block_rank()) * kMmaWarps + warp;
  const int stride = static_cast<int>(cluster.num_blocks()) * kMmaWarps;
  // kSiluMul: rows 0-7 of the mma are gate rows row0..row0 + 7, rows 8-15
  // the up rows `half` further; otherwise 16 consecutive rows.
  constexpr bool kSilu = Output == GemvOutput::kSiluMul;
  constexpr int kOutRows = kSilu ? kMmaRows / 2 : kMmaRows;
  const int half = out_features / 2;
  const int row0 = static_cast<int>(tile.x) * kOutRows;
  const std::uint32_t p0 = tile.y * kMmaPositions;
  const int a_index = row0 + g;
  const int b_index = kSilu ? half + row0 + g : row0 + g + 8;
  const bool a_ok = kSilu ? row0 + g < half : a_index < out_features;
  const bool b_ok = kSilu ? a_ok : b_index < out_features;
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  const T* a_row = w + static_cast<std::size_t>(a_ok ? a_index : 0) * in_features + 8 * c;
  const T* b_row = w + static_cast<std::size_t>(b_ok ? b_index : 0) * in_features + 8 * c;
  const auto k_ok = [&](int kb) { return kb < k_blocks && kb * kMmaK + 8 * c < in_features; };
  // Weights are constant: the first ones are fetched before the previous
  // node ends. They are read once a step, so they are loaded as streaming
  // (ld.global.cs: evict-first in L2) and stop evicting what the step reads
  // again: the attention kernels' code, the KV cache, the activations. H200,
  // same call: Llama-3.2-1B b1 / b8 at 576 tokens 1018 -> 960 / 1080 -> 1012
  // us, Llama-3.1-8B 4701 -> 4605 / 4804 -> 4708
  // (results/h200-2026-11-29-streamed-weights-llama.json); an evict-first
  // cache policy with L1::no_allocate (createpolicy) gained about half.
  uint4 wa[kMmaUnroll], wb[kMmaUnroll], wn[kMmaUnroll];
  const auto load_weights = [&](int kb0) {
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      const int kb = kb0 + j * stride;
      wa[j] =
          a_ok && k_ok(kb) ? __ldcs(reinterpret_cast<const uint4*>(a_row + kb * kMmaK)) : uint4{};
      wb[j] =
          b_ok && k_ok(kb) ? __ldcs(reinterpret_cast<const uint4*>(b_row + kb * kMmaK)) : uint4{};
    }
  };
  load_weights(first);
  const ClusterToFirstBlock gather;
  // The residual element this thread adds to, when the batch is settled:
  // the residual stream was last written two or more nodes back (the
  // decoder's residual GEMVs are never adjacent), so it is final now. Loaded
  // for every position of the capacity, not only live ones, so that it does
  // not wait for the active count's load.
  const int i = threadIdx.x;
  const int out_row = row0 + i / kMmaPositions;
  const std::uint32_t out_n = p0 + i % kMmaPositions;
  const int out_width = kSilu ? half : out_features;
  const std::size_t out_at = static_cast<std::size_t>(out_n) * out_width + out_row;
  const bool out_thread =
      cluster.block_rank() == 0 && i < kOutRows * kMmaPositions && out_row < out_width;
  float residual = 0.0f;
  if constexpr (Output == GemvOutput::kResidualAdd) {
    if (batch.settled && out_thread && out_n < batch.capacity) residual = io.residual[out_at];
  }
  // The bias (constant, like the weights) is loaded before the wait.
  const float bias =
      io.bias != nullptr && out_thread ? load(static_cast<const T*>(io.bias), out_row) : 0.0f;
  const std::uint32_t active = enter_step_node_active(batch);
  if (p0 >= active) {  // uniform across the cluster
    gather.leave();
    return;
  }
  const std::uint32_t p = p0 + g;
  const bool p_ok = p < active;
  // The normed input may gather its rows (DecodeBatch::rows: the logits read
  // each sequence's last row); the output stays at p.
  const std::uint32_t in_p = kNormed && p_ok ? input_row(batch, p) : p;
  // Inputs of the first k-blocks, issued together with the norm's loads.
  const T* row = nullptr;
  if constexpr (Input == GemvInput::kEmbeddingRmsNorm) {
    if (p_ok) row = embedding_row<T>(io, in_features, in_p);
  }
  GemvRaw raw[kMmaUnroll];
  const auto load_inputs = [&](int kb0) {
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      const int kb = kb0 + j * stride;
      raw[j] = p_ok && k_ok(kb)
                   ? gemv_load<T, Input>(io, in_features, in_p, row, kb * kMmaK + 8 * c)
                   : GemvRaw{};
      // The norm weights (L2-resident) come with the inputs, not with the
      // prefetched weights: registers held across the wait cost occupancy.
      if constexpr (kNormed) {
        wn[j] = p_ok && k_ok(kb) ? *reinterpret_cast<const uint4*>(
                                       static_cast<const T*>(io.norm_weight) + kb * kMmaK + 8 * c)
                                 : uint4{};
      }
    }
  };
  load_inputs(first);
  float scale = 0.0f;
  if constexpr (kNormed) {
    const std::uint32_t pw = p0 + warp;
    if (pw < active) {  // uniform across the warp
      const std::uint32_t in_pw = input_row(batch, pw);
      const T* warp_row = nullptr;
      if constexpr (Input == GemvInput::kEmbeddingRmsNorm) {
        warp_row = embedding_row<T>(io, in_features, in_pw);
      }
      const bool store = tile.x == 0 && cluster.block_rank() == 0;
      const float s =
          rms_scale<T, Input>(io, in_features, in_pw, warp_row, store, lane, shared.reduce[warp]);
      if (lane == 0) norm_scale[warp] = s;
    }
    __syncthreads();
    if (p_ok) scale = norm_scale[g];
  }
  float d[4] = {};
  for (int kb0 = first; kb0 < k_blocks; kb0 += kMmaUnroll * stride) {
    if (kb0 != first) {
      load_weights(kb0);
      load_inputs(kb0);
    }
#pragma unroll
    for (int j = 0; j < kMmaUnroll; ++j) {
      if (kb0 + j * stride < k_blocks) {  // uniform across the warp
        const uint4 x = gemv_operand<T, Input>(raw[j], wn[j], scale);
        mma_16816<T>(d, wa[j].x, wb[j].x, wa[j].y, wb[j].y, x.x, x.y);
        mma_16816<T>(d, wa[j].z, wb[j].z, wa[j].w, wb[j].w, x.z, x.w);
      }
    }
  }
  // d0, d1: row g, columns 2c, 2c + 1; d2, d3: row g + 8.
  partial[warp][g * kMmaPositions + 2 * c] = d[0];
  partial[warp][g * kMmaPositions + 2 * c + 1] = d[1];
  partial[warp][(g + 8) * kMmaPositions + 2 * c] = d[2];
  partial[warp][(g + 8) * kMmaPositions + 2 * c + 1] = d[3];
  __syncthreads();
  const auto write = [&](float sum) {
    const float total = io.bias != nullptr ? sum + bias : sum;
    if constexpr (Output == GemvOutput::kStore) {
      store(static_cast<T*>(io.y), out_at, total);
    } else {
      if (!batch.settled) residual = io.residual[out_at];
      io.residual[out_at] = residual + Storage<T>::load(Storage<T>::store(total));
    }
  };
  float sum = 0.0f;
  if (i < kMmaRows * kMmaPositions) {
#pragma unroll
    for (int v = 0; v < kMmaWarps; ++v) sum += partial[v][i];
  }
  if constexpr (kSilu) {
    // Element i (row i / 8, position i % 8) of the gate half pairs with
    // element i + 64 of the up half; block 0 meets them in shared memory.
    const bool element = i < kMmaRows * kMmaPositions;
    float total = 0.0f + sum;
    if (gather.split()) {
      gather.send(&incoming[0][element ? i : 0], kMmaRows * kMmaPositions, sum, element);
      if (cluster.block_rank() != 0) return;
      if (element) {
        for (unsigned r = 1; r < cluster.num_blocks(); ++r) total += incoming[r][i];
      }
    }
    __syncthreads();  // every warp has read `partial`
    if (element) partial[0][i] = Storage<T>::load(Storage<T>::store(total));
    __syncthreads();
    if (out_thread && out_n < active) {
      store(static_cast<T*>(io.y), out_at,
            silu_mul(partial[0][i], partial[0][i + kOutRows * kMmaPositions]));
    }
    return;
  }
  if (!gather.split()) {
    // No split: the block's sum is the result (0 + sum, as the cluster sum
    // below adds it, so the bits are the same), without cluster barriers.
    if (out_thread && out_n < active) write(0.0f + sum);
    return;
  }
  const bool element = i < kMmaRows * kMmaPositions;
  gather.send(&incoming[0][element ? i : 0], kMmaRows * kMmaPositions, sum, element);
  if (out_thread && out_n < active) {  // block 0: the blocks' sums in rank order
    float total = 0.0f + sum;
    for (unsigned r = 1; r < cluster.num_blocks(); ++r) total += incoming[r][i];
    write(total);
  }
}

}  // namespace baton::detail::decode
