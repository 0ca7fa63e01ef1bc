// RoPE and the KV append of every row (kernels/rope_body.cuh), before the
// chunk attention of a long step. q and k of qkv[r] = q (heads * head_dim) |
// k | v (kv_heads * head_dim each) rotate at the row's position pos =
// positions[r]: pairs (2i, 2i+1) of each head by pos * inv_freq[i]
// (inv_freq: head_dim / 2 floats in device memory, RopeInverseFrequencies of
// kernels/rope.h). q is rotated in place; the rotated k and the v are
// appended to the cache at [slot][kv_head][pos] (through the page table when
// paged). A position outside [0, max_context) writes nothing (attention then
// outputs zeros); nor does one whose page is not mapped. A block of 128 per
// row, no shared memory. Refused: a config ValidateDecoderConfig refuses, a
// null batch.active, slots, positions or inv_freq.
#pragma once

#include "kernels/decode_batch.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/rope_body.cuh"
#endif

namespace baton::ops {

struct RopeAppend : KernelOp {
  static constexpr const char* kName = "rope_append";
  struct Args : RowsArgs<RopeAppend> {
    const float* inv_freq = nullptr;
    void* qkv = nullptr;
    KvCacheLayer cache;
  };

  static Args of(const DecoderConfig& c, const float* inv_freq, void* qkv, KvCacheLayer cache,
                 DecodeBatch batch) {
    return {{c, batch}, inv_freq, qkv, cache};
  }

  static cudaError_t check(const Args& a) {
    return decode_shape_ok(a.config, a.batch) && a.batch.slots != nullptr &&
                   a.batch.positions != nullptr && a.inv_freq != nullptr
               ? cudaSuccess
               : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  // V: elements per load, 8 where head_dim allows, else 2.
  template <class T, int V>
  struct Variant : Block<T, detail::decode::kRopeAppendThreads> {
    static constexpr int kLoad = V;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    constexpr int kVector = detail::decode::kVector;
    const LaunchShape shape{dim3(a.batch.capacity), dim3(detail::decode::kRopeAppendThreads)};
    const bool wide = a.config.head_dim % kVector == 0;
    return with_dtype(a.config.dtype, [&](auto t) {
      using T = decltype(t);
      return wide ? f(Variant<T, kVector>{}, shape) : f(Variant<T, 2>{}, shape);
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void*) {
    using T = typename V::Type;
    detail::decode::rope_append_body<T, V::kLoad>(a.config, a.inv_freq, static_cast<T*>(a.qkv),
                                                  a.cache, a.batch, tile);
  }
#endif
};

}  // namespace baton::ops
