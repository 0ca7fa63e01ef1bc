// RoPE, KV-cache append and decode attention: the attention kernel's body,
// shared by the graph path (decode_kernels.cu) and the dynamic-parallelism
// step (src/model/dp_decoder_step.cu). Internal; Abseil-free.
#pragma once

#include <cub/warp/warp_reduce.cuh>
#include <cuda/functional>

#include "kernels/decode_kernel_common.cuh"

namespace baton::detail::decode {

// RoPE, KV append and attention. V is the elements one load moves (8 when
// head_dim is a multiple of 8, else 2). Heads are grouped (grouped-query
// attention): query head h reads key/value head h / group_size().

// The rotation of the V / 2 pairs of a piece starting at element d (even) of
// a head at position pos: angle pos * inv_freq[pair], the table the model
// computed (RopeInverseFrequencies: theta, linear or llama3 scaling). A
// function of (table, pos, d) alone: the attention kernel computes it before
// its wait, the position being settled.
template <int V>
struct RopeAngles {
  float s[V / 2], c[V / 2];
  __device__ RopeAngles() = default;
  __device__ RopeAngles(const DecoderConfig& config, const float* inv_freq, int pos, int d) {
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      const int pair = (d % config.head_dim) / 2 + i;
      // The angle in fp32, as transformers computes it; its error grows with
      // pos, which max_context bounds (the tests' tolerance covers 8192).
      sincosf(static_cast<float>(pos) * inv_freq[pair], &s[i], &c[i]);
    }
  }
};

// The V elements [d, d + V) of a head row `x`, rotated by `angles`.
template <class T, int V>
__device__ __forceinline__ void rotated_piece(const T* x, int d, const RopeAngles<V>& angles,
                                              float (&out)[V]) {
  const auto xv = load_packed<T, V>(x + d);
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    const float x0 = xv[2 * i], x1 = xv[2 * i + 1];
    out[2 * i] = x0 * angles.c[i] - x1 * angles.s[i];
    out[2 * i + 1] = x0 * angles.s[i] + x1 * angles.c[i];
  }
}

// Rotates the piece [d, d + V) of q in place and returns it as the storage
// type rounds it.
template <class T, int V>
__device__ __forceinline__ void rope_query_piece(T* q, int d, const RopeAngles<V>& angles,
                                                 float (&q_out)[V]) {
  float qf[V];
  rotated_piece<T, V>(q, d, angles, qf);
  store_packed<T, V>(q + d, qf);
#pragma unroll
  for (int e = 0; e < V; ++e) q_out[e] = Storage<T>::load(Storage<T>::store(qf[e]));
}

// The piece [d, d + V) of this token's key (rotated) and value: appended to
// the cache rows at `row` when `append` (one query head per group does it),
// and written to k_copy / v_copy (the same bits) when given.
template <class T, int V>
__device__ __forceinline__ void rope_key_value_piece(const T* k, const T* v, T* keys, T* values,
                                                     std::size_t row, int d,
                                                     const RopeAngles<V>& angles, bool append,
                                                     T* k_copy = nullptr, T* v_copy = nullptr) {
  float kf[V];
  rotated_piece<T, V>(k, d, angles, kf);
  const auto vv = load_packed<T, V>(v + d);
  if (append) {
    store_packed<T, V>(keys + row, kf);
    *reinterpret_cast<typename Bits<V>::type*>(values + row) = vv.bits;
  }
  if (k_copy != nullptr) {
    store_packed<T, V>(k_copy, kf);
    *reinterpret_cast<typename Bits<V>::type*>(v_copy) = vv.bits;
  }
}

inline constexpr int kRopeAppendThreads = 128;

// RoPE and the KV append of row p (EnqueueRopeAppendKv): a block of
// kRopeAppendThreads per row. q rotated in place; k rotated and v appended at the
// row's position of its slot.
template <class T, int V>
__device__ __forceinline__ void rope_append_body(DecoderConfig config, const float* inv_freq,
                                                 T* qkv, KvCacheLayer cache, DecodeBatch batch) {
  const std::uint32_t p = blockIdx.x;
  bool live = false;
  std::uint32_t slot = 0;
  int pos = 0;
  if (!enter_step_node_sequence(batch, config, p, live, slot, pos)) return;
  T* q = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  const T* k = q + config.attention_width();
  const T* v = k + config.kv_width();
  for (int d = threadIdx.x * V; d < config.attention_width(); d += kRopeAppendThreads * V) {
    float unused[V];
    rope_query_piece<T, V>(q, d, RopeAngles<V>(config, inv_freq, pos, d), unused);
  }
  for (int d = threadIdx.x * V; d < config.kv_width(); d += kRopeAppendThreads * V) {
    const int kv_head = d / config.head_dim;
    bool mapped = false;
    const std::size_t row = kv_row(config, cache, slot, kv_head, pos, mapped) + d % config.head_dim;
    rope_key_value_piece<T, V>(k, v, static_cast<T*>(cache.keys), static_cast<T*>(cache.values),
                               row, d, RopeAngles<V>(config, inv_freq, pos, d), mapped);
  }
}

inline constexpr int kAttentionThreads = 128;
inline constexpr int kAttentionWarps = kAttentionThreads / 32;
inline constexpr int kAttentionChunk = 8;  // loads of one key row in flight at a time

// The key of an earlier row of this row's chunk (sequence position t),
// from that row's qkv k rotated as rope_key_value_piece rotates it and
// rounded as the cache stores it: the bits the cache will hold, which its
// own block is appending meanwhile. Dotted with q (shared memory).
template <class T, int V>
__device__ __forceinline__ float fresh_key_dot(const DecoderConfig& config, const float* inv_freq,
                                               const T* k_row, int t, const float* q) {
  float dot = 0.0f;
  for (int d = 0; d < config.head_dim; d += V) {
    float kf[V];
    rotated_piece<T, V>(k_row, d, RopeAngles<V>(config, inv_freq, t, d), kf);
#pragma unroll
    for (int e = 0; e < V; ++e) dot += q[d + e] * Storage<T>::load(Storage<T>::store(kf[e]));
  }
  return dot;
}

// One block per (row, head). Scores: a thread per key, its row's loads all
// in flight. Values: groups of head_dim / V threads split the context, each
// thread V consecutive dimensions. With Rope, the block first rotates its
// head's q and k and appends k and v (EnqueueRopeAttention); the keys and
// values of its chunk's earlier rows (batch.fresh) it reads from their qkv
// rows. Dynamic shared memory: scores [max_context].
template <class T, int V, bool Rope>
__device__ __forceinline__ void attention_body(DecoderConfig config, const float* inv_freq, T* qkv,
                                               KvCacheLayer cache, DecodeBatch batch, T* out) {
  using WarpMax = cub::WarpReduce<float>;
  __shared__ typename WarpMax::TempStorage max_temp[kAttentionWarps];
  __shared__ float warp_maxima[kAttentionWarps];
  __shared__ float q[kDecoderMaxHeadDim];
  // This token's k and v (row pos of the cache), kept here so that neither
  // pass reads back from global memory a row the block has just written.
  __shared__ __align__(16) T fresh_k[kDecoderMaxHeadDim];
  __shared__ __align__(16) T fresh_v[kDecoderMaxHeadDim];
  __shared__ float partial[kAttentionThreads * V];
  __shared__ float weights[kAttentionThreads];  // a group's sum of exp(score - max)
  extern __shared__ float scores[];
  const std::uint32_t p = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / config.group_size();
  // The group's first query head appends this token's key and value; the
  // others compute the same rotated key for themselves (no block waits for
  // another) and never read row pos back from the cache.
  const bool appends = head % config.group_size() == 0;
  const int hd = config.head_dim;
  const int pieces = hd / V;  // loads per row
  const int groups = kAttentionThreads / pieces;
  const int group = threadIdx.x / pieces;
  const int piece = threadIdx.x % pieces;
  constexpr int kValueUnroll = 4;
  // Rows of the cache by (slot, kv head, position): kv_row, dense or paged.
  T* const cache_keys = static_cast<T*>(cache.keys);
  T* const cache_values = static_cast<T*>(cache.values);
  // The cache rows before pos were written by earlier steps: final when this
  // kernel starts. With a settled batch the thread's first key chunk and
  // first values are loaded before the wait, off the critical path (only row
  // pos, which this block appends, depends on the node just before). They
  // are loaded with the position, not after it (rows up to max_context; a
  // row at or past pos is never used): the lookup before the wait is two
  // dependent rounds of loads, which the node before this one hides.
  Packed<T, V> key_early[kAttentionChunk];
  Packed<T, V> value_early[kValueUnroll];
  bool live = false, in_range = false;
  std::uint32_t slot = 0;
  int pos = 0;
  // Rows of this row's chunk before it: their keys and values are this
  // step's (qkv), the cache holds rows [0, hist) (fused kernel only: after
  // EnqueueRopeAppendKv every row is in the cache).
  int fresh = 0;
  // Round r of this thread's history rows below `limit` (slot s): the first
  // key chunk of row threadIdx.x + r * kAttentionThreads, and the values of
  // the group's r-th kValueUnroll rows.
  const auto load_history = [&](std::uint32_t s, int r, int limit,
                                Packed<T, V>(&key_rows)[kAttentionChunk],
                                Packed<T, V>(&value_rows)[kValueUnroll]) {
    const int t = threadIdx.x + r * kAttentionThreads;
    const T* key = t < limit ? cache_keys + kv_row(config, cache, s, kv_head, t) : cache_keys;
#pragma unroll
    for (int j = 0; j < kAttentionChunk; ++j) {
      key_rows[j] = t < limit && j < pieces ? load_packed<T, V>(key + j * V) : zero_packed<T, V>();
    }
#pragma unroll
    for (int j = 0; j < kValueUnroll; ++j) {
      const int tv = group + (r * kValueUnroll + j) * groups;
      value_rows[j] =
          group < groups && tv < limit
              ? load_packed<T, V>(cache_values + kv_row(config, cache, s, kv_head, tv) + piece * V)
              : zero_packed<T, V>();
    }
  };
  const auto load_early = [&](std::uint32_t s) {
    load_history(s, 0, config.max_context, key_early, value_early);
  };
  // A thread's RoPE piece (a head has at most 64 pieces: one per thread).
  const bool rope_thread = threadIdx.x < pieces;
  RopeAngles<V> angles;
  // Row pos's place in the cache (its page looked up with the position, off
  // the critical path when the batch is settled).
  std::size_t pos_row = 0;
  bool pos_mapped = false;
  const auto look_up = [&] {
    if (Rope && batch.fresh != nullptr) fresh = static_cast<int>(batch.fresh[p]);
    in_range = look_up_sequence(batch, config, p, live, slot, pos, load_early);
    if (rope_thread && in_range) {
      pos_row = kv_row(config, cache, slot, kv_head, pos, pos_mapped);
      if (Rope) angles = RopeAngles<V>(config, inv_freq, pos, threadIdx.x * V);
    }
  };
  if (batch.settled) look_up();
  enter_step_node(batch);
  if (!batch.settled) look_up();
  if (!live) return;
  T* out_row = out + static_cast<std::size_t>(p) * config.attention_width() + head * hd;
  if (!in_range) {
    const float zeros[V] = {};
    for (int i = threadIdx.x; i < pieces; i += kAttentionThreads) {
      store_packed<T, V>(out_row + i * V, zeros);
    }
    return;
  }
  const int context = pos + 1;
  // A forged fresh count past the sequence's start reads no row before the
  // step's first (rows p - fresh .. p - 1 are this chunk's).
  fresh = fresh > pos ? pos : fresh > static_cast<int>(p) ? static_cast<int>(p) : fresh;
  const int hist = pos - fresh;
  T* qkv_row = qkv + static_cast<std::size_t>(p) * config.qkv_width();
  T* q_row = qkv_row + head * hd;
  const T* k_row = qkv_row + config.attention_width() + kv_head * hd;
  const T* v_row = qkv_row + config.attention_width() + config.kv_width() + kv_head * hd;
  const auto key_row = [&](int t) { return cache_keys + kv_row(config, cache, slot, kv_head, t); };
  const auto value_row = [&](int t) {
    return cache_values + kv_row(config, cache, slot, kv_head, t);
  };
  // The next round of history rows (keys kAttentionThreads.., values after
  // the first kValueUnroll per group), issued now so that they arrive with
  // q, k and v instead of a round trip after the scores (contexts up to 256
  // keys and twice the early values need no load after this one).
  Packed<T, V> key_late[kAttentionChunk];
  Packed<T, V> value_late[kValueUnroll];
  load_history(slot, 1, hist, key_late, value_late);
  if (rope_thread) {
    const int i = threadIdx.x;
    float qf[V];
    const std::size_t row = pos_row + i * V;
    if constexpr (Rope) {
      rope_query_piece<T, V>(q_row, i * V, angles, qf);
      rope_key_value_piece<T, V>(k_row, v_row, cache_keys, cache_values, row, i * V, angles,
                                 appends && pos_mapped, fresh_k + i * V, fresh_v + i * V);
    } else {
      const auto qv = load_packed<T, V>(q_row + i * V);
      *reinterpret_cast<typename Bits<V>::type*>(fresh_k + i * V) =
          load_packed<T, V>(cache_keys + row).bits;
      *reinterpret_cast<typename Bits<V>::type*>(fresh_v + i * V) =
          load_packed<T, V>(cache_values + row).bits;
#pragma unroll
      for (int e = 0; e < V; ++e) qf[e] = qv[e];
    }
#pragma unroll
    for (int e = 0; e < V; ++e) q[i * V + e] = qf[e];
  }
  __syncthreads();  // q and this token's k and v, for the whole block

  const float scale = rsqrtf(static_cast<float>(hd));
  float local_max = -INFINITY;  // over this thread's keys
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    if (t >= hist && t < pos) {  // an earlier row of this chunk
      const T* k_src = qkv_row - static_cast<std::ptrdiff_t>(pos - t) * config.qkv_width() +
                       config.attention_width() + kv_head * hd;
      const float score = fresh_key_dot<T, V>(config, inv_freq, k_src, t, q) * scale;
      scores[t] = score;
      local_max = fmaxf(local_max, score);
      continue;
    }
    const T* key = t == pos ? fresh_k : key_row(t);
    float dot = 0.0f;
    for (int c0 = 0; c0 < pieces; c0 += kAttentionChunk) {
      const bool loaded = c0 == 0 && t < hist && t < 2 * kAttentionThreads;
      const bool late = t >= kAttentionThreads;
      Packed<T, V> kv[kAttentionChunk];
#pragma unroll
      for (int j = 0; j < kAttentionChunk; ++j) {
        kv[j] = loaded            ? (late ? key_late[j] : key_early[j])
                : c0 + j < pieces ? load_packed<T, V>(key + (c0 + j) * V)
                                  : zero_packed<T, V>();
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
  // The row's max: a warp reduction, then every thread combines the warps'
  // (one barrier, which also publishes the scores). The denominator is
  // summed with the values below, not in a reduction of its own: a block
  // reduction of (max, sum) pairs took 0.9 us of the kernel's 4.4 (H100).
  const float warp_max =
      WarpMax(max_temp[threadIdx.x / 32]).Reduce(local_max, cuda::maximum<float>{});
  if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = warp_max;
  __syncthreads();  // the warps' maxima and every score, for the whole block
  float m = warp_maxima[0];
#pragma unroll
  for (int w = 1; w < kAttentionWarps; ++w) m = fmaxf(m, warp_maxima[w]);

  float acc[V] = {};
  float weight = 0.0f;  // the sum of the group's exp(score - m)
  if (group < groups) {
    for (int t0 = group; t0 < context; t0 += kValueUnroll * groups) {
      Packed<T, V> vv[kValueUnroll];
#pragma unroll
      for (int j = 0; j < kValueUnroll; ++j) {
        const int t = t0 + j * groups;
        vv[j] = t0 == group && t < hist                           ? value_early[j]
                : t0 == group + kValueUnroll * groups && t < hist ? value_late[j]
                : t == pos ? load_packed<T, V>(fresh_v + piece * V)
                : t >= hist && t < pos
                    ? load_packed<T, V>(
                          qkv_row - static_cast<std::ptrdiff_t>(pos - t) * config.qkv_width() +
                          config.attention_width() + config.kv_width() + kv_head * hd + piece * V)
                : t < context ? load_packed<T, V>(value_row(t) + piece * V)
                              : zero_packed<T, V>();
      }
#pragma unroll
      for (int j = 0; j < kValueUnroll; ++j) {
        const int t = t0 + j * groups;
        if (t < context) {
          const float s = __expf(scores[t] - m);
          weight += s;
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] += s * vv[j][e];
        }
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) partial[group * hd + piece * V + e] = acc[e];
    if (piece == 0) weights[group] = weight;
  }
  __syncthreads();
  // The groups' partials summed in group order and stored, a thread per
  // element (a head has at most 128).
  if (threadIdx.x < hd) {
    float total = 0.0f, sum = 0.0f;
    for (int g = 0; g < groups; ++g) {
      total += partial[g * hd + threadIdx.x];
      sum += weights[g];
    }
    store(out_row, threadIdx.x, total / sum);
  }
}

}  // namespace baton::detail::decode
