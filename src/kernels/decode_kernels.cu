#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <curand_kernel.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>

#include "baton/decode_kernels.h"

namespace baton {
namespace {

// fp16/bf16 <-> fp32 in one spelling for both storage types.
template <class T>
struct Storage;
template <>
struct Storage<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Storage<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <class T>
__device__ float load(const T* p, std::size_t i) {
  return Storage<T>::load(p[i]);
}
template <class T>
__device__ void store(T* p, std::size_t i, float v) {
  p[i] = Storage<T>::store(v);
}

// The position this block serves, or false when it is past the live batch.
__device__ bool live(const DecodeBatch& batch, std::uint32_t p) { return p < *batch.active; }

// The slot and position of the sequence at p, or false when either is out of
// range (such a sequence is skipped rather than indexed out of bounds).
__device__ bool sequence_of(const DecodeBatch& batch, const DecoderConfig& config, std::uint32_t p,
                            std::uint32_t& slot, int& pos) {
  slot = batch.slots[p];
  if (slot >= batch.max_slots) return false;
  pos = batch.positions[slot];
  return pos >= 0 && pos < config.max_context;
}

__device__ std::size_t cache_row(const DecoderConfig& config, std::uint32_t slot, int head,
                                 int pos) {
  return ((static_cast<std::size_t>(slot) * config.heads + head) * config.max_context + pos) *
         config.head_dim;
}

constexpr int kRowThreads = 256;

template <class T>
__global__ void embedding_kernel(DecoderConfig config, const T* table, const std::int32_t* tokens,
                                 DecodeBatch batch, float* hidden) {
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  const std::int32_t token = tokens[p];
  const bool valid = token >= 0 && token < config.vocab;
  float* row = hidden + static_cast<std::size_t>(p) * config.d_model;
  for (int i = threadIdx.x; i < config.d_model; i += blockDim.x) {
    row[i] = valid ? load(table, static_cast<std::size_t>(token) * config.d_model + i) : 0.0f;
  }
}

template <class T>
__global__ void rms_norm_kernel(DecoderConfig config, const float* hidden, const T* weight,
                                DecodeBatch batch, T* out) {
  using Reduce = cub::BlockReduce<float, kRowThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float scale;
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  const float* row = hidden + static_cast<std::size_t>(p) * config.d_model;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < config.d_model; i += kRowThreads) sum += row[i] * row[i];
  sum = Reduce(temp).Sum(sum);
  if (threadIdx.x == 0) scale = rsqrtf(sum / config.d_model + config.rms_epsilon);
  __syncthreads();
  T* out_row = out + static_cast<std::size_t>(p) * config.d_model;
  for (int i = threadIdx.x; i < config.d_model; i += kRowThreads) {
    out_row[i] = Storage<T>::store(row[i] * scale * load(weight, i));
  }
}

template <class T>
__global__ void residual_add_kernel(DecoderConfig config, float* hidden, const T* delta,
                                    DecodeBatch batch) {
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  const std::size_t base = static_cast<std::size_t>(p) * config.d_model;
  for (int i = threadIdx.x; i < config.d_model; i += blockDim.x) {
    hidden[base + i] += load(delta, base + i);
  }
}

template <class T>
__global__ void rope_append_kv_kernel(DecoderConfig config, T* qkv, KvCacheLayer cache,
                                      DecodeBatch batch) {
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  std::uint32_t slot = 0;
  int pos = 0;
  if (!sequence_of(batch, config, p, slot, pos)) return;
  const int width = config.attention_width();
  const int half_dim = config.head_dim / 2;
  T* q = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  const T* k = q + width;
  const T* v = k + width;
  T* keys = static_cast<T*>(cache.keys);
  T* values = static_cast<T*>(cache.values);
  // One thread per rotated pair of q and of k (same angle), and per v element pair.
  for (int pair = threadIdx.x; pair < width / 2; pair += blockDim.x) {
    const int head = pair / half_dim;
    const int i = pair % half_dim;
    const int d = 2 * i;
    // theta^(-2i/head_dim) in fp32; the angle's error grows with pos, which
    // max_context bounds (the tests' tolerance covers max_context 8192).
    const float inv_freq = exp2f(-(2.0f * i / config.head_dim) * log2f(config.rope_theta));
    float s, c;
    sincosf(static_cast<float>(pos) * inv_freq, &s, &c);
    const std::size_t e = static_cast<std::size_t>(head) * config.head_dim + d;
    const float q0 = load(q, e), q1 = load(q, e + 1);
    store(q, e, q0 * c - q1 * s);
    store(q, e + 1, q0 * s + q1 * c);
    const float k0 = load(k, e), k1 = load(k, e + 1);
    const std::size_t row = cache_row(config, slot, head, pos) + d;
    store(keys, row, k0 * c - k1 * s);
    store(keys, row + 1, k0 * s + k1 * c);
    values[row] = v[e];
    values[row + 1] = v[e + 1];
  }
}

constexpr int kAttentionThreads = 128;
constexpr int kAttentionWarps = kAttentionThreads / 32;

// Dynamic shared memory: q [head_dim] | partial outputs [kAttentionThreads] |
// scores [max_context].
template <class T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_kernel(DecoderConfig config, const T* qkv, KvCacheLayer cache, DecodeBatch batch,
                     T* out) {
  using BlockReduce = cub::BlockReduce<float, kAttentionThreads>;
  using WarpReduce = cub::WarpReduce<float>;
  __shared__ union {
    typename BlockReduce::TempStorage block;
    typename WarpReduce::TempStorage warp[kAttentionWarps];
  } temp;
  __shared__ float broadcast;
  extern __shared__ float shared[];
  const std::uint32_t p = blockIdx.x;
  const int head = blockIdx.y;
  if (!live(batch, p)) return;
  const int hd = config.head_dim;
  T* out_row = out + static_cast<std::size_t>(p) * config.attention_width() + head * hd;
  std::uint32_t slot = 0;
  int pos = 0;
  if (!sequence_of(batch, config, p, slot, pos)) {
    for (int d = threadIdx.x; d < hd; d += kAttentionThreads) store(out_row, d, 0.0f);
    return;
  }
  const int context = pos + 1;
  float* q = shared;
  float* partial = q + hd;
  float* scores = partial + kAttentionThreads;
  const T* q_row = qkv + static_cast<std::size_t>(p) * config.qkv_width() + head * hd;
  for (int d = threadIdx.x; d < hd; d += kAttentionThreads) q[d] = load(q_row, d);
  __syncthreads();

  const T* keys = static_cast<const T*>(cache.keys) + cache_row(config, slot, head, 0);
  const T* values = static_cast<const T*>(cache.values) + cache_row(config, slot, head, 0);
  const float scale = rsqrtf(static_cast<float>(hd));
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // A warp per key: lanes split the head dimension, coalesced along the row.
  for (int t = warp; t < context; t += kAttentionWarps) {
    const T* key = keys + static_cast<std::size_t>(t) * hd;
    float dot = 0.0f;
    for (int d = lane; d < hd; d += 32) dot += q[d] * load(key, d);
    dot = WarpReduce(temp.warp[warp]).Sum(dot);
    if (lane == 0) scores[t] = dot * scale;
  }
  __syncthreads();

  float local_max = -INFINITY;
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    local_max = fmaxf(local_max, scores[t]);
  }
  const float row_max = BlockReduce(temp.block).Reduce(local_max, cuda::maximum<float>{});
  if (threadIdx.x == 0) broadcast = row_max;
  __syncthreads();
  const float m = broadcast;
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    const float e = __expf(scores[t] - m);
    scores[t] = e;
    local_sum += e;
  }
  __syncthreads();  // temp.block is reused, and every score must be exponentiated
  const float row_sum = BlockReduce(temp.block).Sum(local_sum);
  if (threadIdx.x == 0) broadcast = row_sum;
  __syncthreads();
  const float inv_sum = 1.0f / broadcast;

  // Groups of head_dim threads split the context; each thread owns one d.
  const int groups = kAttentionThreads / hd;
  const int group = threadIdx.x / hd;
  const int d = threadIdx.x % hd;
  float acc = 0.0f;
  if (group < groups) {
    for (int t = group; t < context; t += groups) {
      acc += scores[t] * load(values, static_cast<std::size_t>(t) * hd + d);
    }
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.x < hd) {
    float total = 0.0f;
    for (int g = 0; g < groups; ++g) total += partial[g * hd + threadIdx.x];
    store(out_row, threadIdx.x, total * inv_sum);
  }
}

template <class T>
__global__ void silu_mul_kernel(DecoderConfig config, const T* gate_up, DecodeBatch batch, T* out) {
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  const T* row = gate_up + static_cast<std::size_t>(p) * config.gate_up_width();
  T* out_row = out + static_cast<std::size_t>(p) * config.ffn;
  for (int i = threadIdx.x; i < config.ffn; i += blockDim.x) {
    const float g = load(row, i);
    const float u = load(row, config.ffn + i);
    out_row[i] = Storage<T>::store(g / (1.0f + __expf(-g)) * u);
  }
}

// A candidate token: the larger score wins, ties go to the lower index.
struct Candidate {
  float score;
  int index;
};
struct BetterCandidate {
  __device__ Candidate operator()(const Candidate& a, const Candidate& b) const {
    if (a.score > b.score) return a;
    if (b.score > a.score) return b;
    return a.index <= b.index ? a : b;
  }
};

constexpr int kSelectThreads = 512;

// The Philox uniform of element i for (seed, sequence, step): see
// EnqueueSample's comment for the mapping.
__device__ float philox_uniform(unsigned long long seed, std::uint64_t sequence, std::uint32_t step,
                                int vocab, int i) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, sequence,
              static_cast<unsigned long long>(step) * static_cast<unsigned long long>(vocab) + i,
              &state);
  const unsigned int bits = curand(&state);
  // 23 bits keep (b + 0.5) exact in fp32, so u never rounds to 0 or 1.
  return (static_cast<float>(bits >> 9) + 0.5f) * 0x1.0p-23f;
}

template <class T, bool Sample>
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(DecoderConfig config, const T* logits, DecodeBatch batch, SamplingParams params,
                  const std::uint64_t* sequence_ids, const std::uint32_t* sequence_steps,
                  std::int32_t* tokens) {
  using Reduce = cub::BlockReduce<Candidate, kSelectThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const std::uint32_t p = blockIdx.x;
  if (!live(batch, p)) return;
  const T* row = logits + static_cast<std::size_t>(p) * config.vocab;
  const float inv_temperature = Sample ? 1.0f / params.temperature : 1.0f;
  std::uint64_t sequence = 0;
  std::uint32_t step = 0;
  if (Sample) {
    sequence = sequence_ids[p];
    step = sequence_steps[p];
  }
  Candidate best{-INFINITY, INT_MAX};
  const BetterCandidate better;
  for (int i = threadIdx.x; i < config.vocab; i += kSelectThreads) {
    float score = load(row, i);
    if (isnan(score)) score = -INFINITY;
    if (Sample) {
      const float u = philox_uniform(params.seed, sequence, step, config.vocab, i);
      score = score * inv_temperature - logf(-logf(u));
    }
    best = better(best, Candidate{score, i});
  }
  best = Reduce(temp).Reduce(best, better);
  if (threadIdx.x == 0) tokens[p] = best.index < config.vocab ? best.index : 0;
}

constexpr int kGemvWarps = 8;   // rows per block
constexpr int kGemvTile = 4;    // positions per warp (weights read once per tile)
constexpr int kGemvVector = 8;  // 2-byte elements per 16-byte load

template <class T>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const T* w, int out_features, int in_features, const T* x, DecodeBatch batch,
                T* y) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kGemvWarps + warp;
  const std::uint32_t active = *batch.active;
  const std::uint32_t p0 = blockIdx.y * kGemvTile;
  if (r >= out_features || p0 >= active) return;
  const int tile = min(kGemvTile, static_cast<int>(active - p0));
  const uint4* w_row =
      reinterpret_cast<const uint4*>(w + static_cast<std::size_t>(r) * in_features);
  const int vectors = in_features / kGemvVector;
  float acc[kGemvTile] = {};
  for (int v = lane; v < vectors; v += 32) {
    const uint4 wv = w_row[v];
    const T* we = reinterpret_cast<const T*>(&wv);
#pragma unroll
    for (int b = 0; b < kGemvTile; ++b) {
      if (b < tile) {
        const uint4 xv =
            reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(p0 + b) * in_features)[v];
        const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
        for (int e = 0; e < kGemvVector; ++e)
          acc[b] += Storage<T>::load(we[e]) * Storage<T>::load(xe[e]);
      }
    }
  }
  using WarpReduce = cub::WarpReduce<float>;
  __shared__ typename WarpReduce::TempStorage temp[kGemvWarps];
#pragma unroll
  for (int b = 0; b < kGemvTile; ++b) {
    const float sum = WarpReduce(temp[warp]).Sum(acc[b]);
    __syncwarp();
    if (lane == 0 && b < tile) store(y, static_cast<std::size_t>(p0 + b) * out_features + r, sum);
  }
}

// Calls body(T{}) with the storage type of `dtype`.
template <class Body>
cudaError_t dispatch(DecoderDType dtype, Body&& body) {
  switch (dtype) {
    case DecoderDType::kFloat16:
      body(__half{});
      break;
    case DecoderDType::kBFloat16:
      body(__nv_bfloat16{});
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

bool shape_ok(const DecoderConfig& config, const DecodeBatch& batch) {
  return config.d_model > 0 && config.heads > 0 && config.head_dim > 0 &&
         config.head_dim % 2 == 0 && config.head_dim <= kDecoderMaxHeadDim && config.ffn > 0 &&
         config.vocab > 0 && config.max_context > 0 && config.max_context <= kDecoderMaxContext &&
         batch.active != nullptr;
}

}  // namespace

cudaError_t EnqueueEmbedding(const DecoderConfig& config, const void* embedding,
                             const std::int32_t* tokens, DecodeBatch batch, float* hidden,
                             cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<batch.capacity, kRowThreads, 0, stream>>>(
        config, static_cast<const T*>(embedding), tokens, batch, hidden);
  });
}

cudaError_t EnqueueRmsNorm(const DecoderConfig& config, const float* hidden, const void* weight,
                           DecodeBatch batch, void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<batch.capacity, kRowThreads, 0, stream>>>(
        config, hidden, static_cast<const T*>(weight), batch, static_cast<T*>(out));
  });
}

cudaError_t EnqueueResidualAdd(const DecoderConfig& config, float* hidden, const void* delta,
                               DecodeBatch batch, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    residual_add_kernel<T><<<batch.capacity, kRowThreads, 0, stream>>>(
        config, hidden, static_cast<const T*>(delta), batch);
  });
}

cudaError_t EnqueueRopeAppendKv(const DecoderConfig& config, void* qkv, KvCacheLayer cache,
                                DecodeBatch batch, cudaStream_t stream) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_append_kv_kernel<T>
        <<<batch.capacity, kRowThreads, 0, stream>>>(config, static_cast<T*>(qkv), cache, batch);
  });
}

cudaError_t EnqueueDecodeAttention(const DecoderConfig& config, const void* qkv, KvCacheLayer cache,
                                   DecodeBatch batch, void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  const std::size_t shared_bytes =
      sizeof(float) * (config.head_dim + kAttentionThreads + config.max_context);
  const dim3 grid(batch.capacity, config.heads);
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    attention_kernel<T><<<grid, kAttentionThreads, shared_bytes, stream>>>(
        config, static_cast<const T*>(qkv), cache, batch, static_cast<T*>(out));
  });
}

cudaError_t EnqueueSiluMul(const DecoderConfig& config, const void* gate_up, DecodeBatch batch,
                           void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    silu_mul_kernel<T><<<batch.capacity, kRowThreads, 0, stream>>>(
        config, static_cast<const T*>(gate_up), batch, static_cast<T*>(out));
  });
}

cudaError_t EnqueueArgmax(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          std::int32_t* tokens, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    select_kernel<T, false><<<batch.capacity, kSelectThreads, 0, stream>>>(
        config, static_cast<const T*>(logits), batch, SamplingParams{}, nullptr, nullptr, tokens);
  });
}

cudaError_t EnqueueSample(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          SamplingParams params, const std::uint64_t* sequence_ids,
                          const std::uint32_t* sequence_steps, std::int32_t* tokens,
                          cudaStream_t stream) {
  if (!(params.temperature > 0.0f)) {
    return EnqueueArgmax(config, logits, batch, tokens, stream);
  }
  if (!shape_ok(config, batch) || sequence_ids == nullptr || sequence_steps == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    select_kernel<T, true><<<batch.capacity, kSelectThreads, 0, stream>>>(
        config, static_cast<const T*>(logits), batch, params, sequence_ids, sequence_steps, tokens);
  });
}

cudaError_t EnqueueGemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                        const void* x, DecodeBatch batch, void* y, cudaStream_t stream) {
  const auto aligned = [](const void* ptr) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
  };
  if (out_features < 1 || in_features < 1 || in_features % kGemvVector != 0 || !aligned(w) ||
      !aligned(x) || batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  const dim3 grid((out_features + kGemvWarps - 1) / kGemvWarps,
                  (batch.capacity + kGemvTile - 1) / kGemvTile);
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    gemv_kernel<T><<<grid, kGemvWarps * 32, 0, stream>>>(static_cast<const T*>(w), out_features,
                                                         in_features, static_cast<const T*>(x),
                                                         batch, static_cast<T*>(y));
  });
}

}  // namespace baton
