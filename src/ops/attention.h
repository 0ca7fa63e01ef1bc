// Decode attention over the KV cache (kernels/attention/attention_body.cuh), alone or
// with RoPE and the KV append fused in.
//
// out[r][head] = softmax(q · K^T / sqrt(head_dim)) · V over the sequence's
// cache entries [0, pos] of key/value head head / group_size() (its context,
// this token included), for the q in qkv[r]. A context of at most
// kAttentionUnitKeys keys takes one block per (row, query head), or with
// AttentionShortRows::kGrouped (for the models the tensor-core path takes)
// one per (row, key/value head) on tensor cores; a longer one is split along
// the context (kernels/attention/attention_split.h): the group's blocks read each key
// and value once for all its query heads, each serving contiguous units
// whose softmax partials go through `scratch` and are combined in unit
// order. A row's path and bits depend on its q, its context and
// `short_rows` alone (not on the batch, the bucket or the grid).
//
// decode(): every row of the step already appended (ops::RopeAppend); q is
// only read. rope(): RoPE, the append and attention as one kernel, with the
// same results (q rotated in place, k and v appended once): every block
// rotates its q and this token's k for itself, one block per (row,
// key/value head) appends k and v at pos, and the keys and values of the
// row's chunk before it (batch.fresh) come from those rows of qkv, rotated
// as the cache would hold them (the same bits), since their own blocks are
// appending them meanwhile.
//
// Refused: a config ValidateDecoderConfig refuses, a null batch.active,
// slots or positions (or inv_freq with RoPE), a `scratch` that does not
// cover capacity rows where max_context exceeds one unit
// (attention_scratch_ok), a `short_rows` that is none of its values.
#pragma once

#include "kernels/attention/attention_split.h"
#include "kernels/decode_batch.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/attention/attention_body.cuh"
#endif

namespace baton::ops {

struct Attention : KernelOp {
  static constexpr const char* kName = "attention";
  struct Args : RowsArgs<Attention> {
    const float* inv_freq = nullptr;  // RoPE's table (with_rope() only)
    void* qkv = nullptr;
    KvCacheLayer cache;
    AttentionScratch scratch;
    AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead;
    void* out = nullptr;
    bool rope = false;
  };

  static Args decode(const DecoderConfig& c, const void* qkv, KvCacheLayer cache, DecodeBatch batch,
                     AttentionScratch scratch, void* out,
                     AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead) {
    // qkv is only read without RoPE.
    return {{c, batch}, nullptr, const_cast<void*>(qkv), cache, scratch, short_rows, out, false};
  }
  static Args with_rope(const DecoderConfig& c, const float* inv_freq, void* qkv,
                        KvCacheLayer cache, DecodeBatch batch, AttentionScratch scratch, void* out,
                        AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead) {
    return {{c, batch}, inv_freq, qkv, cache, scratch, short_rows, out, true};
  }

  static cudaError_t check(const Args& a) {
    const bool ok = decode_shape_ok(a.config, a.batch) && a.batch.slots != nullptr &&
                    a.batch.positions != nullptr && (!a.rope || a.inv_freq != nullptr) &&
                    attention_scratch_ok(a.config, a.batch.capacity, a.scratch) &&
                    (a.short_rows == AttentionShortRows::kPerQueryHead ||
                     a.short_rows == AttentionShortRows::kGrouped);
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  // V: elements per load (8 where head_dim allows, else 2); H: query heads
  // per pass of the CUDA-core split path; Paths: the bodies the kernel holds
  // (kernels/attention/attention_body.cuh), a function of the model and
  // short_rows. The grouped tensor-core kernel for head_dim 64 (no short
  // path, no other head dim) asks for three blocks per SM, which its ring
  // leaves room for: Llama-3.2-1B's step of 32 rows at 576 tokens has 768
  // busy blocks, two waves of them instead of three. (At head_dim 128 the
  // ring allows two; a cap of 168 registers only made its body spill.)
  template <class T, int V, int H, bool Rope, detail::decode::AttentionPaths P>
  struct Variant : Block<T, detail::decode::kAttentionThreads,
                         P == detail::decode::AttentionPaths::kGroupedMma64
                             ? detail::decode::kAttentionGroupedMinBlocks
                             : detail::decode::kAttentionMinBlocks> {
    using Shared = detail::decode::AttentionShared<T, V, H, P>;
    static constexpr int kLoad = V, kHeads = H;
    static constexpr bool kRope = Rope;
    static constexpr detail::decode::AttentionPaths kPaths = P;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    using namespace detail::decode;
    const AttentionLaunchShape s = attention_launch_shape(a.config, a.batch.capacity, a.short_rows);
    const auto launch = [&](auto variant) {
      using Shared = typename decltype(variant)::Shared;
      // The typed part first, then the scores (or the tensor-core ring).
      return f(variant, LaunchShape{s.grid, dim3(kAttentionThreads), dim3(1, 1, 1),
                                    align_shared(sizeof(Shared)) + s.shared_bytes});
    };
    using P = AttentionPaths;
    const auto with_rope = [&](auto t, auto rope) {
      using T = decltype(t);
      constexpr bool R = decltype(rope)::value;
      const bool wide = a.config.head_dim % kVector == 0;
      if (!s.split) {  // (the single-pass kernel has no use for H)
        return wide ? launch(Variant<T, kVector, 4, R, P::kSinglePass>{})
                    : launch(Variant<T, 2, 4, R, P::kSinglePass>{});
      }
      if (attention_split_mma(a.config)) {  // (head_dim a multiple of 16: wide)
        if (!attention_groups_short_rows(a.config, a.short_rows)) {
          return launch(Variant<T, kVector, 4, R, P::kSplitMma>{});
        }
        return a.config.head_dim == 64 ? launch(Variant<T, kVector, 4, R, P::kGroupedMma64>{})
                                       : launch(Variant<T, kVector, 4, R, P::kGroupedMma>{});
      }
      if (attention_pass_heads(a.config.group_size()) == 8) {
        return wide ? launch(Variant<T, kVector, 8, R, P::kSplitCudaCore>{})
                    : launch(Variant<T, 2, 8, R, P::kSplitCudaCore>{});
      }
      return wide ? launch(Variant<T, kVector, 4, R, P::kSplitCudaCore>{})
                  : launch(Variant<T, 2, 4, R, P::kSplitCudaCore>{});
    };
    return with_dtype(a.config.dtype, [&](auto t) {
      return a.rope ? with_rope(t, std::true_type{}) : with_rope(t, std::false_type{});
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    using Shared = typename V::Shared;
    float* const scores =
        reinterpret_cast<float*>(static_cast<char*>(shared) + align_shared(sizeof(Shared)));
    detail::decode::attention_body<T, V::kLoad, V::kHeads, V::kRope, V::kPaths>(
        a.config, a.inv_freq, static_cast<T*>(a.qkv), a.cache, a.batch, a.scratch, tile,
        shared_as<Shared>(shared), scores, static_cast<T*>(a.out));
  }
#endif
};

}  // namespace baton::ops
