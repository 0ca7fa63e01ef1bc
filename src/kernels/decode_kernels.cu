// Latency is what the decode step's kernels pay for (one small row per
// position, a handful of positions): every thread issues all of its 16-byte
// loads before it uses any, rows that are long get more blocks, and every
// kernel is launched with programmatic dependent launch (baton/step_launch.cuh)
// so it starts while its predecessor finishes. Each kernel loads only
// constant data (weights) before wait_for_previous_nodes() and lets the next
// node launch right after it, once all of its blocks are resident.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <curand_kernel.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>
#include <type_traits>
#include <utility>

#include "baton/decode_kernels.h"
#include "baton/step_launch.cuh"

namespace baton {
namespace {

namespace cg = cooperative_groups;

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

// V consecutive 2-byte elements moved as one load: 16 bytes (V = 8) where
// rows allow it, 4 bytes (V = 2) for heads whose size is only even.
template <int V>
struct Bits;
template <>
struct Bits<8> {
  using type = uint4;
};
template <>
struct Bits<2> {
  using type = unsigned int;
};
template <class T, int V>
struct Packed {
  typename Bits<V>::type bits;
  __device__ float operator[](int e) const {
    return Storage<T>::load(reinterpret_cast<const T*>(&bits)[e]);
  }
};
template <class T, int V>
__device__ Packed<T, V> load_packed(const T* p) {
  return Packed<T, V>{*reinterpret_cast<const typename Bits<V>::type*>(p)};
}
template <class T, int V>
__device__ Packed<T, V> zero_packed() {
  Packed<T, V> z;
  z.bits = {};
  return z;
}
template <class T, int V>
__device__ void store_packed(T* p, const float (&f)[V]) {
  typename Bits<V>::type bits;
  T* e = reinterpret_cast<T*>(&bits);
#pragma unroll
  for (int i = 0; i < V; ++i) e[i] = Storage<T>::store(f[i]);
  *reinterpret_cast<typename Bits<V>::type*>(p) = bits;
}

constexpr int kVector = 8;  // 2-byte elements per 16-byte load

// Eight fp32 values of the residual stream (two 16-byte loads).
struct Floats8 {
  float v[kVector];
};
__device__ Floats8 load_floats8(const float* p) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  return Floats8{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
}
__device__ void store_floats8(float* p, const Floats8& f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f.v[4], f.v[5], f.v[6], f.v[7]);
}

// Waits for the nodes before this kernel and lets the next one launch. Every
// block calls it before its first early return too, so no kernel can finish
// before its predecessor did (the chain's ordering is transitive).
__device__ void enter_step_node() {
  wait_for_previous_nodes();
  allow_next_node();
}

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

// ---------------------------------------------------------------------------
// Row kernels: embedding, residual add and RMSNorm over one position's
// d_model row, alone or fused. A thread keeps up to kRowCached vectors of
// its row in registers between the sum of squares and the scaling; longer
// rows re-read the rest of the row it wrote itself.

constexpr int kRowThreads = 128;
constexpr int kRowCached = 4;

enum class RowSource { kHidden, kEmbedding, kResidual };

struct RowArgs {
  const void* source = nullptr;  // embedding table or residual delta (dtype)
  const std::int32_t* tokens = nullptr;
  float* hidden = nullptr;
  const void* weight = nullptr;  // RMSNorm weight (dtype); null: no norm
  void* out = nullptr;           // RMSNorm output (dtype)
};

template <class T, RowSource Source>
__device__ Floats8 row_input(const DecoderConfig& config, const RowArgs& a, std::uint32_t p,
                             std::int32_t token, int v) {
  float* hidden = a.hidden + static_cast<std::size_t>(p) * config.d_model + v * kVector;
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
                                static_cast<std::size_t>(p) * config.d_model + v * kVector);
#pragma unroll
    for (int i = 0; i < kVector; ++i) x.v[i] += d[i];
    store_floats8(hidden, x);
  }
  return x;
}

template <class T, RowSource Source, bool Norm>
__global__ void __launch_bounds__(kRowThreads)
    row_kernel(DecoderConfig config, RowArgs a, DecodeBatch batch) {
  using Reduce = cub::BlockReduce<float, kRowThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ float scale_shared;
  const std::uint32_t p = blockIdx.x;
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
  enter_step_node();
  if (p >= *batch.active) return;
  std::int32_t token = 0;
  if constexpr (Source == RowSource::kEmbedding) token = a.tokens[p];
  Floats8 x[kRowCached];
#pragma unroll
  for (int j = 0; j < kRowCached; ++j) {
    const int v = threadIdx.x + j * kRowThreads;
    if (v < vectors) x[j] = row_input<T, Source>(config, a, p, token, v);
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
    const Floats8 y = row_input<T, Source>(config, a, p, token, v);
    if constexpr (Norm) {
#pragma unroll
      for (int i = 0; i < kVector; ++i) sum += y.v[i] * y.v[i];
    }
  }
  if constexpr (Norm) {
    sum = Reduce(temp).Sum(sum);
    if (threadIdx.x == 0) scale_shared = rsqrtf(sum / config.d_model + config.rms_epsilon);
    __syncthreads();
    const float scale = scale_shared;
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
    const float* hidden = a.hidden + static_cast<std::size_t>(p) * config.d_model;
    for (int v = threadIdx.x + kRowCached * kRowThreads; v < vectors; v += kRowThreads) {
      normalize(load_floats8(hidden + v * kVector),
                load_packed<T, kVector>(static_cast<const T*>(a.weight) + v * kVector), v);
    }
  }
}

// ---------------------------------------------------------------------------
// RoPE, KV append and attention. V is the elements one load moves (8 when
// head_dim is a multiple of 8, else 2).

// Rotates the pairs of one V-element piece of a head starting at element d
// (even) by pos * theta^(-d / head_dim).
template <int V>
__device__ void rotate(const DecoderConfig& config, int pos, int d, float (&x)[V],
                       const float (&s)[V / 2], const float (&c)[V / 2]) {
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c[i] - x1 * s[i];
    x[2 * i + 1] = x0 * s[i] + x1 * c[i];
  }
}

// Rotates the V elements [d, d + V) of q and k of one head, stores the rotated
// q in place and appends the rotated k and the v to the cache row `row`.
// Returns the rotated q as the storage type rounds it.
template <class T, int V>
__device__ void rope_append_piece(const DecoderConfig& config, T* q, const T* k, const T* v,
                                  T* keys, T* values, std::size_t row, int pos, int d,
                                  float (&q_out)[V]) {
  float s[V / 2], c[V / 2];
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    const int pair = (d % config.head_dim) / 2 + i;
    // theta^(-2i/head_dim) in fp32; the angle's error grows with pos, which
    // max_context bounds (the tests' tolerance covers max_context 8192).
    const float inv_freq = exp2f(-(2.0f * pair / config.head_dim) * log2f(config.rope_theta));
    sincosf(static_cast<float>(pos) * inv_freq, &s[i], &c[i]);
  }
  const auto qv = load_packed<T, V>(q + d);
  const auto kv = load_packed<T, V>(k + d);
  const auto vv = load_packed<T, V>(v + d);
  float qf[V], kf[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    qf[e] = qv[e];
    kf[e] = kv[e];
  }
  rotate<V>(config, pos, d, qf, s, c);
  rotate<V>(config, pos, d, kf, s, c);
  store_packed<T, V>(q + d, qf);
  store_packed<T, V>(keys + row, kf);
  *reinterpret_cast<typename Bits<V>::type*>(values + row) = vv.bits;
#pragma unroll
  for (int e = 0; e < V; ++e) q_out[e] = Storage<T>::load(Storage<T>::store(qf[e]));
}

template <class T, int V>
__global__ void __launch_bounds__(kRowThreads)
    rope_append_kv_kernel(DecoderConfig config, T* qkv, KvCacheLayer cache, DecodeBatch batch) {
  const std::uint32_t p = blockIdx.x;
  enter_step_node();
  if (p >= *batch.active) return;
  std::uint32_t slot = 0;
  int pos = 0;
  if (!sequence_of(batch, config, p, slot, pos)) return;
  const int width = config.attention_width();
  T* q = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  for (int d = threadIdx.x * V; d < width; d += kRowThreads * V) {
    const int head = d / config.head_dim;
    const std::size_t row = cache_row(config, slot, head, pos) + d % config.head_dim;
    float unused[V];
    rope_append_piece<T, V>(config, q, q + width, q + 2 * width, static_cast<T*>(cache.keys),
                            static_cast<T*>(cache.values), row, pos, d, unused);
  }
}

constexpr int kAttentionThreads = 128;
constexpr int kAttentionChunk = 8;  // loads of one key row in flight at a time

// One block per (position, head). Scores: a thread per key, its row's loads
// all in flight. Values: groups of head_dim / V threads split the context,
// each thread V consecutive dimensions. With Rope, the block first rotates
// its head's q and k and appends k and v (EnqueueRopeAttention).
// Dynamic shared memory: scores [max_context].
template <class T, int V, bool Rope>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_kernel(DecoderConfig config, T* qkv, KvCacheLayer cache, DecodeBatch batch, T* out) {
  using BlockReduce = cub::BlockReduce<float, kAttentionThreads>;
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ float broadcast;
  __shared__ float q[kDecoderMaxHeadDim];
  __shared__ float partial[kAttentionThreads * V];
  extern __shared__ float scores[];
  const std::uint32_t p = blockIdx.x;
  const int head = blockIdx.y;
  enter_step_node();
  if (p >= *batch.active) return;
  const int hd = config.head_dim;
  const int pieces = hd / V;  // loads per row
  T* out_row = out + static_cast<std::size_t>(p) * config.attention_width() + head * hd;
  std::uint32_t slot = 0;
  int pos = 0;
  if (!sequence_of(batch, config, p, slot, pos)) {
    const float zeros[V] = {};
    for (int i = threadIdx.x; i < pieces; i += kAttentionThreads) {
      store_packed<T, V>(out_row + i * V, zeros);
    }
    return;
  }
  const int context = pos + 1;
  T* q_row = qkv + static_cast<std::size_t>(p) * config.qkv_width() + head * hd;
  T* keys = static_cast<T*>(cache.keys) + cache_row(config, slot, head, 0);
  T* values = static_cast<T*>(cache.values) + cache_row(config, slot, head, 0);
  for (int i = threadIdx.x; i < pieces; i += kAttentionThreads) {
    float qf[V];
    if constexpr (Rope) {
      const int width = config.attention_width();
      rope_append_piece<T, V>(config, q_row, q_row + width, q_row + 2 * width, keys, values,
                              static_cast<std::size_t>(pos) * hd + i * V, pos, i * V, qf);
    } else {
      const auto qv = load_packed<T, V>(q_row + i * V);
#pragma unroll
      for (int e = 0; e < V; ++e) qf[e] = qv[e];
    }
#pragma unroll
    for (int e = 0; e < V; ++e) q[i * V + e] = qf[e];
  }
  __syncthreads();  // q, and with Rope this token's cache rows, for the whole block

  const float scale = rsqrtf(static_cast<float>(hd));
  float local_max = -INFINITY;
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    const T* key = keys + static_cast<std::size_t>(t) * hd;
    float dot = 0.0f;
    for (int c0 = 0; c0 < pieces; c0 += kAttentionChunk) {
      Packed<T, V> kv[kAttentionChunk];
#pragma unroll
      for (int j = 0; j < kAttentionChunk; ++j) {
        kv[j] = c0 + j < pieces ? load_packed<T, V>(key + (c0 + j) * V) : zero_packed<T, V>();
      }
#pragma unroll
      for (int j = 0; j < kAttentionChunk; ++j) {
        if (c0 + j < pieces) {
#pragma unroll
          for (int e = 0; e < V; ++e) dot += q[(c0 + j) * V + e] * kv[j][e];
        }
      }
    }
    const float score = dot * scale;
    scores[t] = score;
    local_max = fmaxf(local_max, score);
  }
  const float row_max = BlockReduce(temp).Reduce(local_max, cuda::maximum<float>{});
  if (threadIdx.x == 0) broadcast = row_max;
  __syncthreads();
  const float m = broadcast;
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    const float e = __expf(scores[t] - m);
    scores[t] = e;
    local_sum += e;
  }
  __syncthreads();  // temp is reused, and every score must be exponentiated
  const float row_sum = BlockReduce(temp).Sum(local_sum);
  if (threadIdx.x == 0) broadcast = row_sum;
  __syncthreads();
  const float inv_sum = 1.0f / broadcast;

  const int groups = kAttentionThreads / pieces;
  const int group = threadIdx.x / pieces;
  const int piece = threadIdx.x % pieces;
  float acc[V] = {};
  if (group < groups) {
    constexpr int kUnroll = 4;
    for (int t0 = group; t0 < context; t0 += kUnroll * groups) {
      Packed<T, V> vv[kUnroll];
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const int t = t0 + j * groups;
        vv[j] = t < context
                    ? load_packed<T, V>(values + static_cast<std::size_t>(t) * hd + piece * V)
                    : zero_packed<T, V>();
      }
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        const int t = t0 + j * groups;
        if (t < context) {
          const float s = scores[t];
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] += s * vv[j][e];
        }
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) partial[group * hd + piece * V + e] = acc[e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pieces; i += kAttentionThreads) {
    float total[V] = {};
    for (int g = 0; g < groups; ++g) {
#pragma unroll
      for (int e = 0; e < V; ++e) total[e] += partial[g * hd + i * V + e];
    }
#pragma unroll
    for (int e = 0; e < V; ++e) total[e] *= inv_sum;
    store_packed<T, V>(out_row + i * V, total);
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    silu_mul_kernel(DecoderConfig config, const T* gate_up, DecodeBatch batch, T* out) {
  const std::uint32_t p = blockIdx.y;
  const int v = blockIdx.x * kRowThreads + threadIdx.x;
  enter_step_node();
  if (p >= *batch.active || v >= config.ffn / kVector) return;
  const T* row = gate_up + static_cast<std::size_t>(p) * config.gate_up_width();
  const auto g = load_packed<T, kVector>(row + v * kVector);
  const auto u = load_packed<T, kVector>(row + config.ffn + v * kVector);
  float o[kVector];
#pragma unroll
  for (int e = 0; e < kVector; ++e) o[e] = g[e] / (1.0f + __expf(-g[e])) * u[e];
  store_packed<T, kVector>(out + static_cast<std::size_t>(p) * config.ffn + v * kVector, o);
}

// ---------------------------------------------------------------------------
// Token selection: a cluster of blocks per position splits the vocabulary;
// each block reduces its share and the cluster's first block reduces the
// blocks' candidates through distributed shared memory.

// A candidate token: the larger score wins, ties go to the lower index (a
// total order, so the reduction's shape cannot change the winner).
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

constexpr int kSelectThreads = 256;
constexpr int kSelectMaxCluster = 8;  // the portable cluster size
constexpr int kSelectUnroll = 2;      // 16-byte loads per thread in flight

// Gumbel noise of the 8 elements [i, i + 8) for (seed, sequence, step): see
// EnqueueSample's comment for the mapping. The first offset is a multiple of
// 4 (vocab and i are multiples of 8), so one Philox block serves 4 elements,
// in the order curand() would return them.
__device__ void gumbel8(unsigned long long seed, std::uint64_t sequence, std::uint32_t step,
                        int vocab, int i, float (&g)[kVector]) {
  curandStatePhilox4_32_10_t state;
  curand_init(seed, sequence,
              static_cast<unsigned long long>(step) * static_cast<unsigned long long>(vocab) + i,
              &state);
  const uint4 a = curand4(&state);
  const uint4 b = curand4(&state);
  const unsigned int bits[kVector] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int e = 0; e < kVector; ++e) {
    // 23 bits keep (b + 0.5) exact in fp32, so u never rounds to 0 or 1.
    const float u = (static_cast<float>(bits[e] >> 9) + 0.5f) * 0x1.0p-23f;
    g[e] = -logf(-logf(u));
  }
}

template <class T, bool Sample>
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(DecoderConfig config, const T* logits, DecodeBatch batch, SamplingParams params,
                  const std::uint64_t* sequence_ids, const std::uint32_t* sequence_steps,
                  std::int32_t* tokens) {
  using Reduce = cub::BlockReduce<Candidate, kSelectThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ Candidate block_best;
  const cg::cluster_group cluster = cg::this_cluster();
  const std::uint32_t p = blockIdx.y;
  enter_step_node();
  // Uniform across the cluster (all its blocks serve p): none waits alone.
  if (p >= *batch.active) return;
  const T* row = logits + static_cast<std::size_t>(p) * config.vocab;
  const float inv_temperature = Sample ? 1.0f / params.temperature : 1.0f;
  std::uint64_t sequence = 0;
  std::uint32_t step = 0;
  if (Sample) {
    sequence = sequence_ids[p];
    step = sequence_steps[p];
  }
  const int vectors = config.vocab / kVector;
  const int stride = static_cast<int>(cluster.num_blocks()) * kSelectThreads;
  Candidate best{-INFINITY, INT_MAX};
  const BetterCandidate better;
  for (int v0 = static_cast<int>(cluster.block_rank()) * kSelectThreads + threadIdx.x; v0 < vectors;
       v0 += kSelectUnroll * stride) {
    Packed<T, kVector> x[kSelectUnroll];
#pragma unroll
    for (int j = 0; j < kSelectUnroll; ++j) {
      const int v = v0 + j * stride;
      x[j] = v < vectors ? load_packed<T, kVector>(row + v * kVector) : zero_packed<T, kVector>();
    }
#pragma unroll
    for (int j = 0; j < kSelectUnroll; ++j) {
      const int v = v0 + j * stride;
      if (v >= vectors) break;
      float g[kVector] = {};
      if (Sample) gumbel8(params.seed, sequence, step, config.vocab, v * kVector, g);
#pragma unroll
      for (int e = 0; e < kVector; ++e) {
        float score = x[j][e];
        if (isnan(score)) score = -INFINITY;
        if (Sample) score = score * inv_temperature + g[e];
        best = better(best, Candidate{score, v * kVector + e});
      }
    }
  }
  best = Reduce(temp).Reduce(best, better);
  if (threadIdx.x == 0) block_best = best;
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    Candidate total = block_best;
    for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
      total = better(total, *cluster.map_shared_rank(&block_best, r));
    }
    tokens[p] = total.index < config.vocab ? total.index : 0;
  }
  cluster.sync();  // every block's candidate stays readable until block 0 is done
}

// ---------------------------------------------------------------------------
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

constexpr int kMmaRows = 16;
constexpr int kMmaPositions = 8;
constexpr int kMmaWarps = 8;
constexpr int kMmaK = 32;  // elements of a row per k-block (two mmas)
constexpr int kMmaUnroll = 4;
constexpr int kMmaMaxSplit = 8;        // blocks of a cluster (portable size)
constexpr int kMmaTargetBlocks = 264;  // two per SM of an H100/H200

enum class GemvInput { kPlain, kGated };

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

template <class T, GemvInput Input>
__global__ void __launch_bounds__(kMmaWarps * 32)
    gemv_kernel(const T* w, int out_features, int in_features, const T* x, DecodeBatch batch,
                T* y) {
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
  enter_step_node();
  const std::uint32_t active = *batch.active;
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

// Calls body(T{}) with the storage type of `dtype`; body returns the launch's
// cudaError_t.
template <class Body>
cudaError_t dispatch(DecoderDType dtype, Body&& body) {
  switch (dtype) {
    case DecoderDType::kFloat16:
      return body(__half{});
    case DecoderDType::kBFloat16:
      return body(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// The shapes ValidateDecoderConfig accepts (16-byte rows included).
bool shape_ok(const DecoderConfig& config, const DecodeBatch& batch) {
  return config.d_model > 0 && config.heads > 0 && config.head_dim > 0 &&
         config.head_dim % 2 == 0 && config.head_dim <= kDecoderMaxHeadDim && config.ffn > 0 &&
         config.vocab > 0 && config.max_context > 0 && config.max_context <= kDecoderMaxContext &&
         config.d_model % kVector == 0 && config.ffn % kVector == 0 &&
         config.vocab % kVector == 0 && config.attention_width() % kVector == 0 &&
         batch.active != nullptr;
}

bool aligned(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

template <RowSource Source, bool Norm>
cudaError_t launch_row(const DecoderConfig& config, const RowArgs& args, DecodeBatch batch,
                       cudaStream_t stream) {
  if (!shape_ok(config, batch) || !aligned(args.source) || !aligned(args.hidden) ||
      !aligned(args.weight) || !aligned(args.out)) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  return dispatch(config.dtype, [&](auto tag) {
    return launch_step_kernel(row_kernel<decltype(tag), Source, Norm>, dim3(batch.capacity),
                              dim3(kRowThreads), 0, stream, config, args, batch);
  });
}

template <bool Rope>
cudaError_t launch_attention(const DecoderConfig& config, void* qkv, KvCacheLayer cache,
                             DecodeBatch batch, void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  const std::size_t shared_bytes = sizeof(float) * config.max_context;
  const dim3 grid(batch.capacity, config.heads);
  const bool wide = config.head_dim % kVector == 0;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return wide ? launch_step_kernel(attention_kernel<T, kVector, Rope>, grid,
                                     dim3(kAttentionThreads), shared_bytes, stream, config,
                                     static_cast<T*>(qkv), cache, batch, static_cast<T*>(out))
                : launch_step_kernel(attention_kernel<T, 2, Rope>, grid, dim3(kAttentionThreads),
                                     shared_bytes, stream, config, static_cast<T*>(qkv), cache,
                                     batch, static_cast<T*>(out));
  });
}

// launch_step_kernel plus clusters of `cluster` blocks.
template <typename... Params, typename... Args>
cudaError_t launch_clustered_step_kernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                                         dim3 cluster, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster.x;
  attributes[1].val.clusterDim.y = cluster.y;
  attributes[1].val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t launch{};
  launch.gridDim = grid;
  launch.blockDim = block;
  launch.stream = stream;
  launch.attrs = attributes;
  launch.numAttrs = 2;
  return cudaLaunchKernelEx(&launch, kernel, std::forward<Args>(args)...);
}

template <bool Sample>
cudaError_t launch_select(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          SamplingParams params, const std::uint64_t* sequence_ids,
                          const std::uint32_t* sequence_steps, std::int32_t* tokens,
                          cudaStream_t stream) {
  // Enough blocks that each thread has about kSelectUnroll loads, at most a
  // portable cluster.
  const int vectors = config.vocab / kVector;
  const int per_block = kSelectThreads * kSelectUnroll;
  const unsigned cluster = static_cast<unsigned>(
      std::min(kSelectMaxCluster, std::max(1, (vectors + per_block - 1) / per_block)));
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_clustered_step_kernel(select_kernel<T, Sample>, dim3(cluster, batch.capacity),
                                        dim3(kSelectThreads), dim3(cluster), stream, config,
                                        static_cast<const T*>(logits), batch, params, sequence_ids,
                                        sequence_steps, tokens);
  });
}

template <GemvInput Input>
cudaError_t launch_gemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                        const void* x, DecodeBatch batch, void* y, cudaStream_t stream) {
  if (out_features < 1 || in_features < 1 || in_features % kVector != 0 || !aligned(w) ||
      !aligned(x) || batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  // Short, wide weights (few row blocks, long rows) split K across a cluster
  // so about two blocks per SM stream them. The split depends on the shape
  // alone, never on the batch (batch invariance).
  const int row_blocks = (out_features + kMmaRows - 1) / kMmaRows;
  const int k_blocks = (in_features + kMmaK - 1) / kMmaK;
  int split = std::min(kMmaMaxSplit, std::max(1, kMmaTargetBlocks / row_blocks));
  while (split > 1 && split * kMmaWarps > k_blocks) --split;
  const dim3 grid(row_blocks, (batch.capacity + kMmaPositions - 1) / kMmaPositions, split);
  return dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_clustered_step_kernel(gemv_kernel<T, Input>, grid, dim3(kMmaWarps * 32),
                                        dim3(1, 1, split), stream, static_cast<const T*>(w),
                                        out_features, in_features, static_cast<const T*>(x), batch,
                                        static_cast<T*>(y));
  });
}

}  // namespace

cudaError_t EnqueueEmbedding(const DecoderConfig& config, const void* embedding,
                             const std::int32_t* tokens, DecodeBatch batch, float* hidden,
                             cudaStream_t stream) {
  if (tokens == nullptr) return cudaErrorInvalidValue;
  RowArgs args;
  args.source = embedding;
  args.tokens = tokens;
  args.hidden = hidden;
  return launch_row<RowSource::kEmbedding, false>(config, args, batch, stream);
}

cudaError_t EnqueueRmsNorm(const DecoderConfig& config, const float* hidden, const void* weight,
                           DecodeBatch batch, void* out, cudaStream_t stream) {
  RowArgs args;
  args.hidden = const_cast<float*>(hidden);  // read only: RowSource::kHidden
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kHidden, true>(config, args, batch, stream);
}

cudaError_t EnqueueResidualAdd(const DecoderConfig& config, float* hidden, const void* delta,
                               DecodeBatch batch, cudaStream_t stream) {
  RowArgs args;
  args.source = delta;
  args.hidden = hidden;
  return launch_row<RowSource::kResidual, false>(config, args, batch, stream);
}

cudaError_t EnqueueEmbeddingRmsNorm(const DecoderConfig& config, const void* embedding,
                                    const std::int32_t* tokens, const void* weight,
                                    DecodeBatch batch, float* hidden, void* out,
                                    cudaStream_t stream) {
  if (tokens == nullptr) return cudaErrorInvalidValue;
  RowArgs args;
  args.source = embedding;
  args.tokens = tokens;
  args.hidden = hidden;
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kEmbedding, true>(config, args, batch, stream);
}

cudaError_t EnqueueResidualAddRmsNorm(const DecoderConfig& config, float* hidden, const void* delta,
                                      const void* weight, DecodeBatch batch, void* out,
                                      cudaStream_t stream) {
  RowArgs args;
  args.source = delta;
  args.hidden = hidden;
  args.weight = weight;
  args.out = out;
  return launch_row<RowSource::kResidual, true>(config, args, batch, stream);
}

cudaError_t EnqueueRopeAppendKv(const DecoderConfig& config, void* qkv, KvCacheLayer cache,
                                DecodeBatch batch, cudaStream_t stream) {
  if (!shape_ok(config, batch) || batch.slots == nullptr || batch.positions == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  const bool wide = config.head_dim % kVector == 0;
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return wide ? launch_step_kernel(rope_append_kv_kernel<T, kVector>, dim3(batch.capacity),
                                     dim3(kRowThreads), 0, stream, config, static_cast<T*>(qkv),
                                     cache, batch)
                : launch_step_kernel(rope_append_kv_kernel<T, 2>, dim3(batch.capacity),
                                     dim3(kRowThreads), 0, stream, config, static_cast<T*>(qkv),
                                     cache, batch);
  });
}

cudaError_t EnqueueDecodeAttention(const DecoderConfig& config, const void* qkv, KvCacheLayer cache,
                                   DecodeBatch batch, void* out, cudaStream_t stream) {
  // Read only without RoPE.
  return launch_attention<false>(config, const_cast<void*>(qkv), cache, batch, out, stream);
}

cudaError_t EnqueueRopeAttention(const DecoderConfig& config, void* qkv, KvCacheLayer cache,
                                 DecodeBatch batch, void* out, cudaStream_t stream) {
  return launch_attention<true>(config, qkv, cache, batch, out, stream);
}

cudaError_t EnqueueSiluMul(const DecoderConfig& config, const void* gate_up, DecodeBatch batch,
                           void* out, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  const int vectors = config.ffn / kVector;
  const dim3 grid((vectors + kRowThreads - 1) / kRowThreads, batch.capacity);
  return dispatch(config.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch_step_kernel(silu_mul_kernel<T>, grid, dim3(kRowThreads), 0, stream, config,
                              static_cast<const T*>(gate_up), batch, static_cast<T*>(out));
  });
}

cudaError_t EnqueueArgmax(const DecoderConfig& config, const void* logits, DecodeBatch batch,
                          std::int32_t* tokens, cudaStream_t stream) {
  if (!shape_ok(config, batch)) return cudaErrorInvalidValue;
  if (batch.capacity == 0) return cudaSuccess;
  return launch_select<false>(config, logits, batch, SamplingParams{}, nullptr, nullptr, tokens,
                              stream);
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
  return launch_select<true>(config, logits, batch, params, sequence_ids, sequence_steps, tokens,
                             stream);
}

cudaError_t EnqueueGemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                        const void* x, DecodeBatch batch, void* y, cudaStream_t stream) {
  return launch_gemv<GemvInput::kPlain>(dtype, w, out_features, in_features, x, batch, y, stream);
}

cudaError_t EnqueueGatedGemv(DecoderDType dtype, const void* w, int out_features, int in_features,
                             const void* gate_up, DecodeBatch batch, void* y, cudaStream_t stream) {
  return launch_gemv<GemvInput::kGated>(dtype, w, out_features, in_features, gate_up, batch, y,
                                        stream);
}

}  // namespace baton
