// Causal attention for a step whose positions each hold a chunk of token
// rows (kernels/attention/chunk_attention.h has the batch and the contract:
// FlashAttention-2 on tensor cores, grouped-query aware, every key already in
// the cache, one block per output row's tile, deterministic). A CTA per
// (position's query-row tile, key/value head) of chunk_attention_grid.
//
// Refused, before any launch (cudaGetLastError stays clean): a head_dim that
// is not a multiple of 16 in [16, 128] (the plan then appends and attends
// with ops::Attention instead), heads not a multiple of kv_heads,
// max_context <= 0, a null pointer, capacity 0, a pointer not 16-byte
// aligned, or a grid past CUDA's limits.
#pragma once

#include <cstdint>

#include "kernels/attention/chunk_attention.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/attention/chunk_attention_body.cuh"
#endif

namespace baton::ops {

struct ChunkAttention : KernelOp {
  static constexpr const char* kName = "chunk_attention";
  struct Args {
    using Op = ChunkAttention;
    DecoderConfig config;
    const void* qkv = nullptr;
    KvCacheLayer cache;
    ChunkAttentionBatch batch;
    void* out = nullptr;
  };

  static Args of(const DecoderConfig& c, const void* qkv, KvCacheLayer cache,
                 ChunkAttentionBatch batch, void* out) {
    return {c, qkv, cache, batch, out};
  }

  static cudaError_t check(const Args& a) {
    using namespace detail::chunk;
    const DecoderConfig& c = a.config;
    const ChunkAttentionBatch& b = a.batch;
    if (c.head_dim < kMinHeadDim || c.head_dim > kMaxHeadDim || c.head_dim % 16 != 0 ||
        c.heads <= 0 || c.kv_heads < 0 || c.heads % c.key_value_heads() != 0 ||
        c.max_context <= 0 || c.key_value_heads() > 65535) {
      return cudaErrorInvalidValue;
    }
    if (a.qkv == nullptr || a.out == nullptr || a.cache.keys == nullptr ||
        a.cache.values == nullptr || b.active == nullptr || b.tokens == nullptr ||
        b.first_row == nullptr || b.slots == nullptr || b.start == nullptr || b.capacity == 0) {
      return cudaErrorInvalidValue;
    }
    if (!aligned16(a.qkv) || !aligned16(a.out) || !aligned16(a.cache.keys) ||
        !aligned16(a.cache.values)) {
      return cudaErrorInvalidValue;
    }
    const unsigned long long tiles =
        (static_cast<unsigned long long>(b.rows) * c.group_size() + kTileRows - 1) / kTileRows +
        b.capacity;
    return tiles > 0x7fffffffull ? cudaErrorInvalidValue : cudaSuccess;
  }
  // The step's sequences, each with its chunk of the step's rows (the plan
  // set start and max_slots; a node over rows, so the device step skips it
  // on a step without rows).
  BATON_HOST_DEVICE static void bind(Args& a, const OpFrame& frame, const OpNode&) {
    ChunkAttentionBatch& b = a.batch;
    b.active = frame.args.header == nullptr ? nullptr : &frame.args.header->batch;
    b.capacity = frame.sequences;
    b.rows = frame.rows;
    b.tokens = frame.args.tokens;
    b.first_row = frame.args.token_offsets;
    b.slots = frame.args.slots;
    if (frame.serial) b.launch_next_early = false;
  }

#if defined(__CUDACC__)
  template <class T, int D>
  struct Variant : Block<T, detail::chunk::kThreads> {
    static constexpr int kHeadDim = D;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    const dim3 grid = chunk_attention_grid(a.config, a.batch.capacity, a.batch.rows);
    return with_dtype(a.config.dtype, [&](auto t) {
      using T = decltype(t);
      return detail::chunk::with_head_dim(a.config.head_dim, [&](auto d) {
        constexpr int D = decltype(d)::value;
        return f(Variant<T, D>{},
                 LaunchShape{grid, dim3(detail::chunk::kThreads), dim3(1, 1, 1),
                             static_cast<unsigned>(detail::chunk::kSharedBytes<T, D>)});
      });
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    constexpr int D = V::kHeadDim;
    detail::chunk::chunk_attention_body<T, D>(
        a.config, static_cast<const T*>(a.qkv), a.cache, a.batch, static_cast<T*>(a.out), tile,
        shared_as<detail::chunk::ChunkAttentionShared<T, D>>(shared));
  }
#endif
};

}  // namespace baton::ops
