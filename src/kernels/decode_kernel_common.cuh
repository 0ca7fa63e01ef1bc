// Device helpers every decode-step kernel body shares (storage types, 16-byte
// vector loads, the batch's slot/position lookup). Included by the kernel
// bodies (row_kernel_body.cuh, attention_body.cuh, select_body.cuh,
// gemv_body.cuh, ...), which the ops of src/ops run on every launch path, so
// every engine runs the same code. Internal; Abseil-free.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "baton/step_kernel.cuh"
#include "kernels/decode_batch.h"

namespace baton::detail::decode {

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

// silu(gate) * up in fp32, for the SiLU kernel and the gated GEMV alike.
// The fast division (one reciprocal, no slow path) keeps the eight elements
// of a vector independent: IEEE division branches per element, which
// serialized them (one warp's latency is what these kernels pay for; H100,
// tiny model b1: the FFN down GEMV's input took 2.2 us instead of 0.9, the
// step 43.0 -> 40.7 us). For gate < -87, exp overflows and the quotient is
// 0, silu's limit.
__device__ inline float silu_mul(float gate, float up) {
  return __fdividef(gate, 1.0f + __expf(-gate)) * up;
}

// Eight fp32 values of the residual stream (two 16-byte loads).
struct Floats8 {
  float v[kVector];
};
__device__ inline Floats8 load_floats8(const float* p) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  return Floats8{{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w}};
}
__device__ inline void store_floats8(float* p, const Floats8& f) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f.v[4], f.v[5], f.v[6], f.v[7]);
}

// Waits for the nodes before this kernel and lets the next one launch. Every
// block calls it before its first early return too, so no kernel can finish
// before its predecessor did (the chain's ordering is transitive).
//
// With DecodeBatch::launch_next_early the next node may launch before this
// one's wait instead: its blocks become resident and run their pre-wait
// prologue (weights, settled data) while this kernel still waits and works.
__device__ inline void enter_step_node(const DecodeBatch& batch) {
  if (batch.launch_next_early) allow_next_node();
  wait_for_previous_nodes();
  if (!batch.launch_next_early) allow_next_node();
}

// Whether row p is live, with the slot of its sequence and its position in
// it; in range when both index validly (a sequence out of range is skipped
// rather than indexed out of bounds). One round of loads: the active count,
// the slot and the position (p < capacity, so slots[p] and positions[p] are
// always readable) are independent. `at_slot(slot, pos)` runs with them, for
// loads that need only the slot (a slot < max_slots) and may depend on the
// position (loaded in the same round: no second round trip).
template <class AtSlot>
__device__ bool look_up_sequence(const DecodeBatch& batch, const DecoderConfig& config,
                                 std::uint32_t p, bool& live, std::uint32_t& slot, int& pos,
                                 AtSlot&& at_slot) {
  const std::uint32_t active = *batch.active;
  slot = batch.slots[p];
  pos = batch.positions[p];
  const bool slot_ok = slot < batch.max_slots;
  if (slot_ok) at_slot(slot, pos);
  live = p < active;
  return live && slot_ok && pos >= 0 && pos < config.max_context;
}

// The row entry p of a kernel over sequences reads (DecodeBatch::rows).
__device__ inline std::uint32_t input_row(const DecodeBatch& batch, std::uint32_t p) {
  return batch.rows != nullptr ? batch.rows[p] : p;
}

// enter_step_node, returning *batch.active: loaded before the wait when the
// batch is settled (DecodeBatch::settled), after it otherwise.
__device__ inline std::uint32_t enter_step_node_active(const DecodeBatch& batch) {
  const std::uint32_t early = batch.settled ? *batch.active : 0;
  enter_step_node(batch);
  return batch.settled ? early : *batch.active;
}

// The position p's sequence for a step kernel: enter_step_node, then
// look_up_sequence (true when p is live and in range). A settled batch's
// loads are issued before the wait.
__device__ inline bool enter_step_node_sequence(const DecodeBatch& batch,
                                                const DecoderConfig& config, std::uint32_t p,
                                                bool& live, std::uint32_t& slot, int& pos) {
  bool in_range = false;
  if (batch.settled)
    in_range = look_up_sequence(batch, config, p, live, slot, pos, [](auto, auto) {});
  enter_step_node(batch);
  if (!batch.settled)
    in_range = look_up_sequence(batch, config, p, live, slot, pos, [](auto, auto) {});
  return in_range;
}

// Gathers one value per block of a cluster into block 0's shared memory with
// a single cluster barrier (the split-K GEMV's sums, token selection's
// candidates): each other block stores its value there, and block 0 then
// reads only its own memory, so no block waits on a second barrier before it
// exits. A block may store into another's shared memory only once that block
// has started: every block arrives when it constructs this (kernel start)
// and waits just before its remote store, by when the others have long
// started. A block that returns without sending calls leave() first
// (uniformly across the cluster). A cluster of one block uses no barrier.
class ClusterToFirstBlock {
 public:
  __device__ ClusterToFirstBlock() : split_(cg::this_cluster().num_blocks() > 1) {
    if (split_) cg::this_cluster().barrier_arrive();
  }
  [[nodiscard]] __device__ bool split() const { return split_; }
  __device__ void leave() const {
    if (split_) cg::this_cluster().barrier_wait();
  }
  // Every thread of every block calls it (split clusters only); `sender`
  // threads of blocks other than 0 store `value` into block 0's copy of
  // slots[rank * stride]. After it, block 0 reads the other blocks' values.
  template <class V>
  __device__ void send(V* slots, unsigned stride, const V& value, bool sender) const {
    const cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    cluster.barrier_wait();  // every block has started
    if (rank != 0 && sender) *cluster.map_shared_rank(slots + rank * stride, 0) = value;
    cluster.sync();
  }

 private:
  bool split_;
};

// Row `pos` of key/value head `kv_head` of a slot's dense KV cache.
__device__ inline std::size_t cache_row(const DecoderConfig& config, std::uint32_t slot,
                                        int kv_head, int pos) {
  return ((static_cast<std::size_t>(slot) * config.key_value_heads() + kv_head) *
              config.max_context +
          pos) *
         config.head_dim;
}

// The paged KV cache's address, written once: the element offset of token
// t's row of key/value head `kv_head` in pool page `page` ([pool pages]
// [kv_heads][page_tokens][head_dim], page_tokens = 1 << page_shift).
__device__ __forceinline__ std::size_t paged_row(std::uint32_t page, std::size_t kv_heads,
                                                 int kv_head, unsigned page_shift, int t,
                                                 int head_dim) {
  return (((static_cast<std::size_t>(page) * kv_heads + kv_head) << page_shift) +
          (static_cast<std::uint32_t>(t) & ((1u << page_shift) - 1u))) *
         head_dim;
}

// The element offset of row `pos` (0 <= pos < max_context) of key/value head
// `kv_head` of a slot's KV cache, dense or paged (KvCacheLayer); `mapped`
// is false for a paged row whose page is not mapped (the offset is then
// page 0's, in bounds). The page table is written by the scheduler before
// the step's first node, so it is read through the read-only cache.
__device__ inline std::size_t kv_row(const DecoderConfig& config, const KvCacheLayer& cache,
                                     std::uint32_t slot, int kv_head, int pos, bool& mapped) {
  mapped = true;
  if (cache.page_table == nullptr) return cache_row(config, slot, kv_head, pos);
  const std::uint32_t index = static_cast<std::uint32_t>(pos) >> cache.page_shift;
  std::uint32_t page =
      index < cache.pages_per_slot
          ? __ldg(cache.page_table + static_cast<std::size_t>(slot) * cache.pages_per_slot + index)
          : cache.pool_pages;
  mapped = page < cache.pool_pages;
  if (!mapped) page = 0;
  return paged_row(page, static_cast<std::size_t>(config.key_value_heads()), kv_head,
                   cache.page_shift, pos, config.head_dim);
}

// The rows of one (slot, key/value head) of a layer's KV cache, dense or
// paged, for a block that reads many of them (the split attention paths):
// row(t) for any token t of the slot's context (its page is in the table),
// with no bounds check; an unmapped page reads page 0, in bounds, as kv_row
// does. Its fields are the block's own values (references to the config or
// the cache would be reloaded inside the loops).
struct KvRows {
  const std::uint32_t* page_row = nullptr;  // the slot's page-table row; null: dense
  std::size_t dense_base = 0;               // dense: token 0's row
  std::size_t kv_heads = 0;
  std::uint32_t pool_pages = 0;
  unsigned page_shift = 0;
  int kv_head = 0;
  int head_dim = 0;

  __device__ KvRows(const DecoderConfig& config, const KvCacheLayer& cache, std::uint32_t slot,
                    int head, int dim)
      : page_row(cache.page_table != nullptr
                     ? cache.page_table + static_cast<std::size_t>(slot) * cache.pages_per_slot
                     : nullptr),
        dense_base(cache.page_table != nullptr ? 0 : cache_row(config, slot, head, 0)),
        kv_heads(static_cast<std::size_t>(config.key_value_heads())),
        pool_pages(cache.pool_pages),
        page_shift(cache.page_shift),
        kv_head(head),
        head_dim(dim) {}

  [[nodiscard]] __device__ bool paged() const { return page_row != nullptr; }
  // The page holding token t (paged caches only).
  [[nodiscard]] __device__ std::uint32_t page_of(int t) const {
    return __ldg(page_row + (static_cast<std::uint32_t>(t) >> page_shift));
  }
  // Token t's row in `page` (its page_of, looked up earlier).
  [[nodiscard]] __device__ std::size_t in_page(std::uint32_t page, int t) const {
    return paged_row(page < pool_pages ? page : 0u, kv_heads, kv_head, page_shift, t, head_dim);
  }
  [[nodiscard]] __device__ std::size_t row(int t) const {
    return page_row == nullptr ? dense_base + static_cast<std::size_t>(t) * head_dim
                               : in_page(page_of(t), t);
  }
};
__device__ inline std::size_t kv_row(const DecoderConfig& config, const KvCacheLayer& cache,
                                     std::uint32_t slot, int kv_head, int pos) {
  bool mapped;
  return kv_row(config, cache, slot, kv_head, pos, mapped);
}

}  // namespace baton::detail::decode
