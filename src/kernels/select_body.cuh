// Token selection (argmax, or Gumbel-max sampling): the select kernel's body,
// shared by the graph path (decode_kernels.cu) and the dynamic-parallelism
// step (src/dynamic_parallelism/dp_decoder_step.cu). Internal; Abseil-free.
//
// Token selection: a cluster of blocks per position splits the vocabulary;
// each block reduces its share and the cluster's first block reduces the
// blocks' candidates through distributed shared memory.

#pragma once

#include <curand_kernel.h>

#include <climits>
#include <cstdint>

#include "baton/config.h"
#include "kernels/decode_kernel_common.cuh"

namespace baton::detail::decode {

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

// The same order with the score as an unsigned key (larger scores, larger
// keys; -0 counts as +0, as the float comparison has it), so that a warp
// finds its best candidate with two warp-wide min/max instructions instead
// of five rounds of shuffles and comparisons (H100: the block reduction
// took 0.6 us of token selection's 2.3).
struct KeyedCandidate {
  unsigned key;
  int index;
};
__device__ inline unsigned score_key(float score) {
  const unsigned bits = __float_as_uint(score + 0.0f);  // -0 + 0 = +0
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
__device__ inline KeyedCandidate better_keyed(const KeyedCandidate& a, const KeyedCandidate& b) {
  if (a.key != b.key) return a.key > b.key ? a : b;
  return a.index <= b.index ? a : b;
}

inline constexpr int kSelectThreads = 256;
inline constexpr int kSelectWarps = kSelectThreads / 32;
inline constexpr int kSelectMaxCluster = 8;  // the portable cluster size
inline constexpr int kSelectUnroll = 2;      // 16-byte loads per thread in flight

// Blocks (one cluster) per position: enough that each thread has about
// kSelectUnroll loads, at most a portable cluster. A function of the
// vocabulary alone.
[[nodiscard]] BATON_HOST_DEVICE constexpr int select_blocks(int vocab) {
  const int per_block = kSelectThreads * kSelectUnroll;
  const int wanted = (vocab / kVector + per_block - 1) / per_block;
  return wanted < 1 ? 1 : wanted > kSelectMaxCluster ? kSelectMaxCluster : wanted;
}

// Gumbel noise of the 8 elements [i, i + 8) for (seed, sequence, step): see
// EnqueueSample's comment for the mapping. The first offset is a multiple of
// 4 (vocab and i are multiples of 8), so one Philox block serves 4 elements,
// in the order curand() would return them.
__device__ inline void gumbel8(unsigned long long seed, std::uint64_t sequence, std::uint32_t step,
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

// What a caller adds to token selection (the decoder model ends its step
// in the same kernel): prepare(p) runs before the wait for the previous node
// in the one thread that will store position p's token (to load what is
// already final), entered() in every thread once the previous node is done,
// chose(p, token) in the thread that stores position p's token.
struct NoSelectHooks {
  __device__ void prepare(std::uint32_t) {}
  __device__ void entered() const {}
  __device__ void chose(std::uint32_t, std::int32_t) const {}
};

// Grid (blocks, capacity), clusters of (blocks, 1, 1): set at launch time on
// the graph path, compiled in with __cluster_dims__ for device launches
// (select_blocks gives the count).
template <class T, bool Sample, class Hooks = NoSelectHooks>
__device__ __forceinline__ void select_body(DecoderConfig config, const T* logits,
                                            DecodeBatch batch, SamplingParams params,
                                            const std::uint64_t* sequence_ids,
                                            const std::uint32_t* sequence_steps,
                                            std::int32_t* tokens, Hooks hooks = Hooks{}) {
  __shared__ KeyedCandidate warp_best[kSelectWarps];
  __shared__ KeyedCandidate incoming[kSelectMaxCluster];  // block 0's: the other blocks' best
  const cg::cluster_group cluster = cg::this_cluster();
  const std::uint32_t p = blockIdx.y;
  if (cluster.block_rank() == 0 && threadIdx.x == 0 && p < batch.capacity) hooks.prepare(p);
  const ClusterToFirstBlock gather;
  const std::uint32_t active = enter_step_node_active(batch);
  hooks.entered();
  // Uniform across the cluster (all its blocks serve p): none waits alone.
  if (p >= active) {
    gather.leave();
    return;
  }
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
  // The warp's best (the largest key, then the lowest index with it), then
  // the block's from the warps' in warp order.
  const unsigned key = score_key(best.score);
  const unsigned top = __reduce_max_sync(0xffffffffu, key);
  const int index = __reduce_min_sync(0xffffffffu, key == top ? best.index : INT_MAX);
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = KeyedCandidate{top, index};
  __syncthreads();
  KeyedCandidate block = warp_best[0];
#pragma unroll
  for (int w = 1; w < kSelectWarps; ++w) block = better_keyed(block, warp_best[w]);
  const auto choose = [&](const KeyedCandidate& total) {
    const std::int32_t token = total.index < config.vocab ? total.index : 0;
    tokens[p] = token;
    hooks.chose(p, token);
  };
  if (!gather.split()) {  // no cluster barrier to pay
    if (threadIdx.x == 0) choose(block);
    return;
  }
  gather.send(incoming, 1, block, threadIdx.x == 0);
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {  // the blocks' best in rank order
    KeyedCandidate total = block;
    for (unsigned r = 1; r < cluster.num_blocks(); ++r) total = better_keyed(total, incoming[r]);
    choose(total);
  }
}

}  // namespace baton::detail::decode
