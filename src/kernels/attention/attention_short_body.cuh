// The single-pass path of decode attention (kernels/attention/attention_body.cuh), a
// block per (row, query head): every row of a model that does not split,
// and a row of at most kAttentionUnitKeys keys of one that does. Internal;
// Abseil-free.
#pragma once

#include "kernels/attention/attention_row.cuh"

namespace baton::detail::decode {

inline constexpr int kAttentionChunk = 8;        // loads of one key row in flight at a time
inline constexpr int kAttentionValueUnroll = 4;  // value rows in flight per thread

// A short-path thread's history rows of round r below `limit`: the first
// key chunk of row threadIdx.x + r * kAttentionThreads and the values of its
// value group's r-th kAttentionValueUnroll rows (zeros past the limit).
template <class T, int V>
struct ShortHistory {
  Packed<T, V> keys[kAttentionChunk];
  Packed<T, V> values[kAttentionValueUnroll];

  __device__ void load(const DecoderConfig& config, const KvCacheLayer& cache, std::uint32_t slot,
                       int kv_head, int r, int limit) {
    const int pieces = config.head_dim / V;
    const int groups = kAttentionThreads / pieces;
    const int group = threadIdx.x / pieces;
    const int piece = threadIdx.x % pieces;
    const T* const cache_keys = static_cast<const T*>(cache.keys);
    const T* const cache_values = static_cast<const T*>(cache.values);
    const int t = threadIdx.x + r * kAttentionThreads;
    const T* key = t < limit ? cache_keys + kv_row(config, cache, slot, kv_head, t) : cache_keys;
#pragma unroll
    for (int j = 0; j < kAttentionChunk; ++j) {
      keys[j] = t < limit && j < pieces ? load_packed<T, V>(key + j * V) : zero_packed<T, V>();
    }
#pragma unroll
    for (int j = 0; j < kAttentionValueUnroll; ++j) {
      const int tv = group + (r * kAttentionValueUnroll + j) * groups;
      values[j] = group < groups && tv < limit
                      ? load_packed<T, V>(cache_values + kv_row(config, cache, slot, kv_head, tv) +
                                          piece * V)
                      : zero_packed<T, V>();
    }
  }
};

// What a short-path block keeps in shared memory (about 7 KB).
template <class T>
struct AttentionShortShared {
  float warp_maxima[kAttentionWarps];
  float q[kDecoderMaxHeadDim];
  // This token's k and v (row pos of the cache), kept here so that neither
  // pass reads back from global memory a row the block has just written.
  __align__(16) T fresh_k[kDecoderMaxHeadDim];
  __align__(16) T fresh_v[kDecoderMaxHeadDim];
  float partial[kAttentionThreads * kVector];
  float weights[kAttentionThreads];  // a group's sum of exp(score - max)
  float scores[kAttentionUnitKeys];  // the split kernel's (the single-pass one's are dynamic)
};

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

// The short path of attention_body (contract there): every row of the
// single-pass kernel, and a row of the split kernel whose context fits one
// unit (at most kAttentionUnitKeys keys). One block per (row, query head);
// `scores` holds the context's. Scores: a thread per key,
// its row's loads all in flight. Values: groups of head_dim / V threads
// split the context, each thread V consecutive dimensions. With Rope, the
// block first rotates its head's q and k and appends k and v (the group's
// first head); the keys and values of its chunk's earlier rows it reads from
// their qkv rows. Issues its first loads, waits for the previous node if the
// batch is settled (the caller waited otherwise), then attends.
template <class T, int V, bool Rope>
__device__ __forceinline__ void attention_short_body(
    const DecoderConfig& config, const float* inv_freq, T* qkv, const KvCacheLayer& cache,
    const DecodeBatch& batch, const AttentionRow& row, int head, const ShortHistory<T, V>& early,
    AttentionShortShared<T>& sh, float* scores, T* out) {
  const std::uint32_t p = row.index;
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
  constexpr int kValueUnroll = kAttentionValueUnroll;
  // Rows of the cache by (slot, kv head, position): kv_row, dense or paged.
  T* const cache_keys = static_cast<T*>(cache.keys);
  T* const cache_values = static_cast<T*>(cache.values);
  const std::uint32_t slot = row.slot;
  const int pos = row.pos, hist = row.hist;
  // A thread's RoPE piece (a head has at most 64 pieces: one per thread).
  const bool rope_thread = threadIdx.x < pieces;
  RopeAngles<V> angles;
  // Row pos's place in the cache and the angles: before the wait when the
  // batch is settled, off the critical path (`early`, the first round of
  // history rows, was loaded with the position).
  std::size_t pos_row = 0;
  bool pos_mapped = false;
  if (row.in_range) {
    if (rope_thread) {
      pos_row = kv_row(config, cache, slot, kv_head, pos, pos_mapped);
      if (Rope) angles = RopeAngles<V>(config, inv_freq, pos, threadIdx.x * V);
    }
  }
  if (batch.settled) enter_step_node(batch);
  if (!row.live) return;
  T* out_row = out + static_cast<std::size_t>(p) * config.attention_width() + head * hd;
  if (!row.in_range) {
    const float zeros[V] = {};
    for (int i = threadIdx.x; i < pieces; i += kAttentionThreads) {
      store_packed<T, V>(out_row + i * V, zeros);
    }
    return;
  }
  const int context = pos + 1;
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
  ShortHistory<T, V> history_late;
  history_late.load(config, cache, slot, kv_head, 1, hist);
  if (rope_thread) {
    const int i = threadIdx.x;
    float qf[V];
    const std::size_t at = pos_row + i * V;
    if constexpr (Rope) {
      rope_query_piece<T, V>(q_row, i * V, angles, qf);
      rope_key_value_piece<T, V>(k_row, v_row, cache_keys, cache_values, at, i * V, angles,
                                 appends && pos_mapped, sh.fresh_k + i * V, sh.fresh_v + i * V);
    } else {
      const auto qv = load_packed<T, V>(q_row + i * V);
      *reinterpret_cast<typename Bits<V>::type*>(sh.fresh_k + i * V) =
          load_packed<T, V>(cache_keys + at).bits;
      *reinterpret_cast<typename Bits<V>::type*>(sh.fresh_v + i * V) =
          load_packed<T, V>(cache_values + at).bits;
#pragma unroll
      for (int e = 0; e < V; ++e) qf[e] = qv[e];
    }
#pragma unroll
    for (int e = 0; e < V; ++e) sh.q[i * V + e] = qf[e];
  }
  __syncthreads();  // q and this token's k and v, for the whole block

  const float scale = rsqrtf(static_cast<float>(hd));
  float local_max = -INFINITY;  // over this thread's keys
  for (int t = threadIdx.x; t < context; t += kAttentionThreads) {
    if (t >= hist && t < pos) {  // an earlier row of this chunk
      const T* k_src = qkv_row - static_cast<std::ptrdiff_t>(pos - t) * config.qkv_width() +
                       config.attention_width() + kv_head * hd;
      const float score = fresh_key_dot<T, V>(config, inv_freq, k_src, t, sh.q) * scale;
      scores[t] = score;
      local_max = fmaxf(local_max, score);
      continue;
    }
    const T* key = t == pos ? sh.fresh_k : key_row(t);
    float dot = 0.0f;
    for (int c0 = 0; c0 < pieces; c0 += kAttentionChunk) {
      const bool loaded = c0 == 0 && t < hist && t < 2 * kAttentionThreads;
      const bool late = t >= kAttentionThreads;
      Packed<T, V> kv[kAttentionChunk];
#pragma unroll
      for (int j = 0; j < kAttentionChunk; ++j) {
        kv[j] = loaded            ? (late ? history_late.keys[j] : early.keys[j])
                : c0 + j < pieces ? load_packed<T, V>(key + (c0 + j) * V)
                                  : zero_packed<T, V>();
      }
#pragma unroll
      for (int j = 0; j < kAttentionChunk; ++j) {
        if (c0 + j < pieces) {
#pragma unroll
          for (int e = 0; e < V; ++e) dot += sh.q[(c0 + j) * V + e] * kv[j][e];
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
  float warp_max = local_max;
#pragma unroll
  for (int o = 16; o > 0; o /= 2)
    warp_max = fmaxf(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));
  if (threadIdx.x % 32 == 0) sh.warp_maxima[threadIdx.x / 32] = warp_max;
  __syncthreads();  // the warps' maxima and every score, for the whole block
  float m = sh.warp_maxima[0];
#pragma unroll
  for (int w = 1; w < kAttentionWarps; ++w) m = fmaxf(m, sh.warp_maxima[w]);

  float acc[V] = {};
  float weight = 0.0f;  // the sum of the group's exp(score - m)
  if (group < groups) {
    for (int t0 = group; t0 < context; t0 += kValueUnroll * groups) {
      Packed<T, V> vv[kValueUnroll];
#pragma unroll
      for (int j = 0; j < kValueUnroll; ++j) {
        const int t = t0 + j * groups;
        vv[j] = t0 == group && t < hist                           ? early.values[j]
                : t0 == group + kValueUnroll * groups && t < hist ? history_late.values[j]
                : t == pos ? load_packed<T, V>(sh.fresh_v + piece * V)
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
    for (int e = 0; e < V; ++e) sh.partial[group * hd + piece * V + e] = acc[e];
    if (piece == 0) sh.weights[group] = weight;
  }
  __syncthreads();
  // The groups' partials summed in group order and stored, a thread per
  // element (a head has at most 128).
  if (threadIdx.x < hd) {
    float total = 0.0f, sum = 0.0f;
    for (int g = 0; g < groups; ++g) {
      total += sh.partial[g * hd + threadIdx.x];
      sum += sh.weights[g];
    }
    store(out_row, threadIdx.x, total / sum);
  }
}

}  // namespace baton::detail::decode
