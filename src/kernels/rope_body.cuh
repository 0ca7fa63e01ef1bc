// RoPE and the KV-cache append: the rotation helpers every attention body
// shares and the separate RoPE + append kernel's body (ops/rope_append.h),
// which every launch path runs. Internal; Abseil-free.
#pragma once

#include "kernels/decode_kernel_common.cuh"
#include "kernels/tile.h"

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

// RoPE and the KV append of row p = tile.x (ops/rope_append.h): a block of
// kRopeAppendThreads per row, no shared memory. q rotated in place; k
// rotated and v appended at the row's position of its slot.
template <class T, int V>
__device__ __forceinline__ void rope_append_body(DecoderConfig config, const float* inv_freq,
                                                 T* qkv, KvCacheLayer cache, DecodeBatch batch,
                                                 Tile tile) {
  const std::uint32_t p = tile.x;
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

}  // namespace baton::detail::decode
