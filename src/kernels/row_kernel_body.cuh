// The row kernels' bodies (embedding, residual add, RMSNorm, alone or fused;
// SiLU * up): the bodies of ops/row_norm.h and ops/silu_mul.h, which every
// launch path runs. Internal; Abseil-free.
#pragma once

#include <cub/block/block_reduce.cuh>

#include "kernels/decode_kernel_common.cuh"
#include "kernels/row_args.h"
#include "kernels/tile.h"

namespace baton::detail::decode {

// A thread keeps up to kRowCached vectors of its row in registers between
// the sum of squares and the scaling; longer rows re-read the rest of the
// row it wrote itself.
inline constexpr int kRowCached = 4;

// Row r of the input (the residual stream, its embedding row, or the stream
// plus a delta row), as fp32.
template <class T, RowSource Source>
__device__ Floats8 row_input(const DecoderConfig& config, const RowArgs& a, std::uint32_t r,
                             std::int32_t token, int v) {
  float* hidden = a.hidden + static_cast<std::size_t>(r) * config.d_model + v * kVector;
  Floats8 x;
  if constexpr (Source == RowSource::kHidden) {
    x = load_floats8(hidden);
  } else if constexpr (Source == RowSource::kEmbedding) {
    const bool valid = token >= 0 && token < config.vocab;
    const auto e = valid ? load_packed<T, kVector>(
                               static_cast<const T*>(a.source) +
                               static_cast<std::size_t>(token) * config.d_model + v * kVector)
                         : zero_packed<T, kVector>();
#pragma unroll
    for (int i = 0; i < kVector; ++i) x.v[i] = e[i];
    store_floats8(hidden, x);
  } else {
    x = load_floats8(hidden);
    const auto d =
        load_packed<T, kVector>(static_cast<const T*>(a.source) +
                                static_cast<std::size_t>(r) * config.d_model + v * kVector);
#pragma unroll
    for (int i = 0; i < kVector; ++i) x.v[i] += d[i];
    store_floats8(hidden, x);
  }
  return x;
}

// A row kernel's shared memory (its caller provides it).
struct RowShared {
  cub::BlockReduce<float, kRowThreads>::TempStorage reduce;
  float scale;
};

// The body of a row kernel: one block of kRowThreads per row p = tile.x,
// reading input row input_row(batch, p) (the logits' norm reads each
// sequence's last row) and writing output row p.
template <class T, RowSource Source, bool Norm>
__device__ __forceinline__ void row_body(DecoderConfig config, RowArgs a, DecodeBatch batch,
                                         Tile tile, RowShared& shared) {
  using Reduce = cub::BlockReduce<float, kRowThreads>;
  const std::uint32_t p = tile.x;
  const int vectors = config.d_model / kVector;
  // The norm weight is constant: fetch it while the previous node finishes.
  Packed<T, kVector> w[kRowCached];
  if constexpr (Norm) {
#pragma unroll
    for (int j = 0; j < kRowCached; ++j) {
      const int v = threadIdx.x + j * kRowThreads;
      w[j] = v < vectors ? load_packed<T, kVector>(static_cast<const T*>(a.weight) + v * kVector)
                         : zero_packed<T, kVector>();
    }
  }
  if (p >= enter_step_node_active(batch)) return;
  const std::uint32_t r = input_row(batch, p);
  std::int32_t token = 0;
  if constexpr (Source == RowSource::kEmbedding) token = a.tokens[r];
  Floats8 x[kRowCached];
#pragma unroll
  for (int j = 0; j < kRowCached; ++j) {
    const int v = threadIdx.x + j * kRowThreads;
    if (v < vectors) x[j] = row_input<T, Source>(config, a, r, token, v);
  }
  float sum = 0.0f;
  if constexpr (Norm) {
#pragma unroll
    for (int j = 0; j < kRowCached; ++j) {
      if (threadIdx.x + j * kRowThreads < vectors) {
#pragma unroll
        for (int i = 0; i < kVector; ++i) sum += x[j].v[i] * x[j].v[i];
      }
    }
  }
  for (int v = threadIdx.x + kRowCached * kRowThreads; v < vectors; v += kRowThreads) {
    const Floats8 y = row_input<T, Source>(config, a, r, token, v);
    if constexpr (Norm) {
#pragma unroll
      for (int i = 0; i < kVector; ++i) sum += y.v[i] * y.v[i];
    }
  }
  if constexpr (Norm) {
    sum = Reduce(shared.reduce).Sum(sum);
    if (threadIdx.x == 0) shared.scale = rsqrtf(sum / config.d_model + config.rms_epsilon);
    __syncthreads();
    const float scale = shared.scale;
    T* out = static_cast<T*>(a.out) + static_cast<std::size_t>(p) * config.d_model;
    const auto normalize = [&](const Floats8& y, const Packed<T, kVector>& wv, int v) {
      float o[kVector];
#pragma unroll
      for (int i = 0; i < kVector; ++i) o[i] = y.v[i] * scale * wv[i];
      store_packed<T, kVector>(out + v * kVector, o);
    };
#pragma unroll
    for (int j = 0; j < kRowCached; ++j) {
      const int v = threadIdx.x + j * kRowThreads;
      if (v < vectors) normalize(x[j], w[j], v);
    }
    const float* hidden = a.hidden + static_cast<std::size_t>(r) * config.d_model;
    for (int v = threadIdx.x + kRowCached * kRowThreads; v < vectors; v += kRowThreads) {
      normalize(load_floats8(hidden + v * kVector),
                load_packed<T, kVector>(static_cast<const T*>(a.weight) + v * kVector), v);
    }
  }
}

// SiLU(gate) * up of each position's gate | up row, the FFN input on the
// cuBLASLt and GEMM paths (Baton's GEMV makes it in the gate | up GEMV:
// GemvOutput::kSiluMul): a grid of (ffn / kVector / kRowThreads, positions)
// blocks of kRowThreads, no shared memory.
template <class T>
__device__ __forceinline__ void silu_mul_body(const DecoderConfig& config, const T* gate_up,
                                              const DecodeBatch& batch, T* out, Tile tile) {
  const std::uint32_t p = tile.y;
  const int v = static_cast<int>(tile.x) * kRowThreads + threadIdx.x;
  if (p >= enter_step_node_active(batch) || v >= config.ffn / kVector) return;
  const T* row = gate_up + static_cast<std::size_t>(p) * config.gate_up_width();
  const auto g = load_packed<T, kVector>(row + v * kVector);
  const auto u = load_packed<T, kVector>(row + config.ffn + v * kVector);
  float o[kVector];
#pragma unroll
  for (int e = 0; e < kVector; ++e) o[e] = silu_mul(g[e], u[e]);
  store_packed<T, kVector>(out + static_cast<std::size_t>(p) * config.ffn + v * kVector, o);
}

}  // namespace baton::detail::decode
