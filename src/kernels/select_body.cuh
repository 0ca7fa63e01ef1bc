// Token selection (argmax, Gumbel-max sampling, or top-k / top-p sampling):
// the body of ops/select.h and ops/select_and_end.h, which every launch path
// runs.
// Internal; Abseil-free.
//
// Token selection: a cluster of blocks per position splits the vocabulary;
// each block reduces its share and the cluster's first block reduces the
// blocks' candidates through distributed shared memory. Greedy and plain
// temperature sampling take one pass over the row; a position that asks for
// top-k or top-p takes the filtered path (select_filter.cuh), several passes.
// Which one is decided per position at run time (captured graphs serve
// requests that change), uniformly across the position's cluster.

#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "baton/config.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/select_common.cuh"
#include "kernels/select_filter.cuh"
#include "kernels/select_logprobs.cuh"
#include "kernels/tile.h"

namespace baton::detail::decode {

// What a caller adds to token selection (the decoder model ends its step
// in the same kernel): prepare(p) runs before the wait for the previous node
// in the one thread that will store position p's token (to load what is
// already final), entered(tile) in every thread once the previous node is
// done, chose(p, token) in the thread that stores position p's token. When
// adjusts(p) (the same in every thread of p's cluster), every thread calls
// adjust(p, row, rank, blocks) first, which may rewrite the row's entries
// [rank, vocab) strided by blocks * blockDim.x in place (the penalties and
// min_tokens of the decoder's requests); selection reads the row after a
// cluster barrier. When p's sampling asks for logprobs (Sample only), every
// lane of block 0's first warp calls logprobs(p, token, row, lp, count)
// before chose: lp holds the row's log-softmax denominator and, in lane j
// < count, its j-th best token, computed on the row before adjust.
struct NoSelectHooks {
  __device__ void prepare(std::uint32_t) {}
  __device__ void entered(const Tile&) const {}
  __device__ bool adjusts(std::uint32_t) const { return false; }
  template <class T>
  __device__ void adjust(std::uint32_t, const T*, unsigned, unsigned) const {}
  template <class T>
  __device__ void logprobs(std::uint32_t, std::int32_t, const T*, const RowLogprobs&,
                           unsigned) const {}
  __device__ void chose(std::uint32_t, std::int32_t) const {}
};

// The single pass of greedy (Sample = false) and plain temperature sampling:
// this thread's best candidate of its share of the row.
template <class T, bool Sample>
__device__ __forceinline__ Candidate best_in_row(const T* row, int vocab, float inv_temperature,
                                                 unsigned long long seed, std::uint64_t sequence,
                                                 std::uint32_t step) {
  Candidate best{-INFINITY, INT_MAX};
  const BetterCandidate better;
  for_each_row_vector(row, vocab, [&](int v, const Packed<T, kVector>& x) {
    float g[kVector] = {};
    if (Sample) gumbel8(seed, sequence, step, vocab, v * kVector, g);
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      best = better(best,
                    Candidate{select_score<Sample>(x[e], inv_temperature, g[e]), v * kVector + e});
    }
  });
  return best;
}

// Token selection's shared memory (its caller provides it); the filtered
// path's only where sampling is compiled in.
struct SelectSharedPlain {
  KeyedCandidate warp_best[kSelectWarps];
  KeyedCandidate incoming[kSelectMaxCluster];  // block 0's: the other blocks' best
};
struct SelectSharedSampled : SelectSharedPlain {
  FilterShared filter;
  LogprobShared logprobs;
};
template <bool Sample>
using SelectShared = std::conditional_t<Sample, SelectSharedSampled, SelectSharedPlain>;

// Grid (blocks, capacity) = tile, clusters of (blocks, 1, 1): set at launch
// time on the graph path, compiled in with __cluster_dims__ for device
// launches (select_blocks gives the count). Sample = false: argmax for every
// position (params unused). Sample = true: each position by its own
// parameters (params.at(p)): greedy when temperature <= 0, the filtered path
// when it asks for top_k in (0, vocab) or top_p < 1, plain Gumbel-max
// otherwise.
template <class T, bool Sample, class Hooks = NoSelectHooks>
__device__ __forceinline__ void select_body(DecoderConfig config, const T* logits,
                                            DecodeBatch batch, SelectParams params,
                                            const std::uint64_t* sequence_ids,
                                            const std::uint32_t* sequence_steps,
                                            std::int32_t* tokens, Tile tile,
                                            SelectShared<Sample>& shared, Hooks hooks = Hooks{}) {
  auto& warp_best = shared.warp_best;
  auto& incoming = shared.incoming;
  const cg::cluster_group cluster = cg::this_cluster();
  const std::uint32_t p = tile.y;
  if (cluster.block_rank() == 0 && threadIdx.x == 0 && p < batch.capacity) hooks.prepare(p);
  const ClusterToFirstBlock gather;
  const std::uint32_t active = enter_step_node_active(batch);
  hooks.entered(tile);
  // Uniform across the cluster (all its blocks serve p): none waits alone.
  if (p >= active) {
    gather.leave();
    return;
  }
  // Rows are padded_vocab() apart; the padding is never a candidate.
  const T* row = logits + static_cast<std::size_t>(p) * config.padded_vocab();
  // The position's parameters, loaded once (every thread of the cluster
  // loads the same record, so the branches on it are uniform); with Sample
  // only. Logprobs first, on the row as the model wrote it.
  const PositionSampling s = params.at(p);
  unsigned logprobs = 0;  // the count + 1; 0: none
  RowLogprobs lp;
  if constexpr (Sample) {
    logprobs = s.logprobs;
    if (logprobs > kMaxLogprobs + 1) logprobs = kMaxLogprobs + 1;
    if (logprobs != 0) lp = row_logprobs<T>(row, config.vocab, logprobs - 1, gather, shared.logprobs);
  }
  if (hooks.adjusts(p)) {
    // Writes before reads, across the cluster. The gather arrived on the
    // cluster barrier at its construction: wait (every block started),
    // write, arrive and wait (the writes are seen), and arrive again so that
    // the gather's send or leave finds the barrier as it left it.
    if (gather.split()) cluster.barrier_wait();
    hooks.adjust(p, row, cluster.block_rank(), cluster.num_blocks());
    if (gather.split()) {
      cluster.sync();
      cluster.barrier_arrive();
    } else {
      __syncthreads();
    }
  }
  Candidate best;
  if constexpr (!Sample) {
    best = best_in_row<T, false>(row, config.vocab, 1.0f, 0, 0, 0);
  } else {
    const std::uint64_t sequence = sequence_ids[p];
    const std::uint32_t step = sequence_steps[p];
    const bool filtered =
        (s.top_k > 0 && s.top_k < static_cast<unsigned>(config.vocab)) || s.top_p < 1.0f;
    if (!(s.temperature > 0.0f)) {  // NaN too: greedy
      best = best_in_row<T, false>(row, config.vocab, 1.0f, 0, 0, 0);
    } else if (!filtered) {
      best = best_in_row<T, true>(row, config.vocab, 1.0f / s.temperature, s.seed, sequence, step);
    } else {
      best = filtered_best<T>(row, config.vocab, s, sequence, step, gather, shared.filter);
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
  // Block 0 ends the position: its first thread, or, with logprobs, its
  // first warp (the hook writes the record with every lane, then the token).
  const auto choose = [&](const KeyedCandidate& total) {
    const std::int32_t token = total.index < config.vocab ? total.index : 0;
    if (logprobs != 0) hooks.logprobs(p, token, row, lp, logprobs - 1);
    if (threadIdx.x == 0) {
      tokens[p] = token;
      hooks.chose(p, token);
    }
  };
  const unsigned enders = logprobs != 0 ? 32u : 1u;
  if (!gather.split()) {  // no cluster barrier to pay
    if (threadIdx.x < enders) choose(block);
    return;
  }
  gather.send(incoming, 1, block, threadIdx.x == 0);
  if (cluster.block_rank() == 0 && threadIdx.x < enders) {  // the blocks' best in rank order
    KeyedCandidate total = block;
    for (unsigned r = 1; r < cluster.num_blocks(); ++r) total = better_keyed(total, incoming[r]);
    choose(total);
  }
}

}  // namespace baton::detail::decode
