// Token selection's logprobs: the log-softmax of one position's row, for the
// chosen token and the row's best `count` tokens (count <= kMaxLogprobs),
// computed by the cluster that selects the position's token
// (select_body.cuh runs it, for a position whose PositionSampling asks, on
// the row as the model wrote it, before any adjust hook rewrites it).
// Internal; Abseil-free.
//
// One pass over the row. Every thread keeps an online softmax denominator
// (the largest logit and the sum of exp(x - largest)); every warp keeps its
// best `count` entries as a list sorted across its lanes (lane j holds the
// j-th best), into which a lane's element enters only when it beats the
// list's last entry, one warp-wide insertion (a ballot and a shuffle) per
// entering element: about count * ln(elements / count) of them per warp.
// The warps' lists and sums merge in warp order in the block's first warp,
// the blocks' in rank order in block 0's first warp (through distributed
// shared memory). The order of tokens is a total one (the logit's 16-bit key,
// then the lower index), so the lists do not depend on the split; the sums'
// order is fixed by the cluster's shape, a function of the vocabulary alone.
#pragma once

#include <climits>
#include <cstdint>

#include "kernels/select_common.cuh"
#include "kernels/select_filter.cuh"

namespace baton::detail::decode {

static_assert(kMaxLogprobs <= 32, "a warp's list holds an entry per lane");

// A list entry: the logit's key above the complemented index, so that a
// larger entry is a larger logit, then a lower index; 0 is no entry (every
// real key, -inf's included, is nonzero).
__device__ inline unsigned long long logprob_entry(unsigned key, int index) {
  return static_cast<unsigned long long>(key) << 32 | (0xFFFFFFFFu - static_cast<unsigned>(index));
}
__device__ inline int logprob_entry_index(unsigned long long entry) {
  return static_cast<int>(0xFFFFFFFFu - static_cast<unsigned>(entry));
}
__device__ inline unsigned logprob_entry_key(unsigned long long entry) {
  return static_cast<unsigned>(entry >> 32);
}

// The softmax's denominator as (largest logit, sum of exp(x - largest)).
struct SoftmaxSum {
  float max = -INFINITY;
  float sum = 0.0f;
};
__device__ inline void add_logit(SoftmaxSum& s, float x) {
  if (x == -INFINITY) return;  // weighs nothing (NaN arrives as -inf)
  if (x > s.max) {
    s.sum = s.sum * expf(s.max - x) + 1.0f;
    s.max = x;
  } else {
    s.sum += expf(x - s.max);
  }
}
__device__ inline SoftmaxSum combine_sums(SoftmaxSum a, SoftmaxSum b) {
  if (b.max > a.max) {
    const SoftmaxSum t = a;
    a = b;
    b = t;
  }
  if (b.max == -INFINITY) return a;
  a.sum += b.sum * expf(b.max - a.max);
  return a;
}

// Inserts `entry` (the same in every lane) into the warp's sorted list.
__device__ inline unsigned long long list_insert(unsigned long long mine, unsigned long long entry) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned at = __popc(__ballot_sync(0xffffffffu, mine > entry));  // entries before it
  const unsigned long long above = __shfl_up_sync(0xffffffffu, mine, 1);
  return lane < at ? mine : lane == at ? entry : above;
}

struct LogprobShared {
  unsigned long long warp_lists[kSelectWarps][kMaxLogprobs];
  SoftmaxSum warp_sums[kSelectWarps];
  unsigned long long block_lists[kSelectMaxCluster][kMaxLogprobs];  // block 0's: the others'
  SoftmaxSum block_sums[kSelectMaxCluster];
};

// What block 0's first warp holds after row_logprobs: lane j's entry is the
// row's j-th best (j < count), lse the log of the softmax's denominator.
struct RowLogprobs {
  unsigned long long entry = 0;
  float lse = 0.0f;
  // Entry j's log-probability, in lane j.
  template <class T>
  __device__ float top_logprob() const {
    return key_logit<T>(logprob_entry_key(entry)) - lse;
  }
};

// Every thread of every block of the position's cluster calls it (the branch
// to it is uniform). `gather` is select_body's: its start-of-kernel arrival
// is consumed here and made again before returning, as the adjust hook and
// the filtered path do. The result is valid in block 0's first warp.
template <class T>
__device__ __forceinline__ RowLogprobs row_logprobs(const T* row, int vocab, unsigned count,
                                                    const ClusterToFirstBlock& gather,
                                                    LogprobShared& shared) {
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  unsigned long long mine = 0;
  unsigned long long bar = 0;  // the list's count-th entry: an element must beat it
  SoftmaxSum sum;
  const auto offer = [&](unsigned long long entry) {
    if (count == 0) return;
    unsigned want = __ballot_sync(0xffffffffu, entry > bar);
    while (want != 0) {  // uniform: a ballot
      const int from = __ffs(want) - 1;
      mine = list_insert(mine, __shfl_sync(0xffffffffu, entry, from));
      bar = __shfl_sync(0xffffffffu, mine, count - 1);
      want &= ~(1u << from);
      want &= __ballot_sync(0xffffffffu, entry > bar);
    }
  };
  // The warp walks whole groups of 32 vectors (the loop is uniform across
  // it, for the ballots); a lane past the row offers nothing.
  const int vectors = (vocab + kVector - 1) / kVector;
  const int stride = static_cast<int>(cluster.num_blocks()) * kSelectThreads;
  for (int v0 = static_cast<int>(rank * kSelectThreads + warp * 32); v0 < vectors; v0 += stride) {
    const int v = v0 + static_cast<int>(lane);
    const Packed<T, kVector> x =
        v < vectors ? load_packed<T, kVector>(row + v * kVector) : zero_packed<T, kVector>();
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      const int i = v * kVector + e;
      const bool valid = v < vectors && i < vocab;
      const unsigned key = element_key<T>(x, e);
      if (valid) add_logit(sum, key_logit<T>(key));
      offer(valid ? logprob_entry(key, i) : 0ull);
    }
  }
  // The warp's sum in lane 0, a fixed tree.
  for (int offset = 16; offset > 0; offset /= 2) {
    const SoftmaxSum other{__shfl_down_sync(0xffffffffu, sum.max, offset),
                           __shfl_down_sync(0xffffffffu, sum.sum, offset)};
    sum = combine_sums(sum, other);
  }
  if (lane < count) shared.warp_lists[warp][lane] = mine;
  if (lane == 0) shared.warp_sums[warp] = sum;
  __syncthreads();
  // The block's in its first warp, the other warps' in warp order. A list is
  // sorted: the first of its entries that cannot enter ends it.
  if (warp == 0) {
    for (int w = 1; w < kSelectWarps; ++w) {
      for (unsigned j = 0; j < count; ++j) {
        const unsigned long long entry = shared.warp_lists[w][j];
        if (entry <= bar) break;  // uniform: every lane reads the same word
        mine = list_insert(mine, entry);
        bar = __shfl_sync(0xffffffffu, mine, count - 1);
      }
      sum = combine_sums(sum, shared.warp_sums[w]);  // lane 0's is the one used
    }
  }
  if (gather.split()) {
    cluster.barrier_wait();  // every block started: block 0's shared memory is live
    if (rank != 0 && warp == 0) {
      if (lane < count) *cluster.map_shared_rank(&shared.block_lists[rank][lane], 0) = mine;
      if (lane == 0) *cluster.map_shared_rank(&shared.block_sums[rank], 0) = sum;
    }
    cluster.sync();
    cluster.barrier_arrive();  // re-armed for the gather's next wait
    if (rank == 0 && warp == 0) {
      for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
        for (unsigned j = 0; j < count; ++j) {
          const unsigned long long entry = shared.block_lists[r][j];
          if (entry <= bar) break;
          mine = list_insert(mine, entry);
          bar = __shfl_sync(0xffffffffu, mine, count - 1);
        }
        sum = combine_sums(sum, shared.block_sums[r]);
      }
    }
  }
  RowLogprobs out;
  out.entry = mine;
  // Lane 0's sum is the cluster's (in block 0's first warp).
  out.lse = __shfl_sync(0xffffffffu, sum.max + logf(sum.sum), 0);
  return out;
}

}  // namespace baton::detail::decode
