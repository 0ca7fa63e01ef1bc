// What every path of token selection shares (select_body.cuh, the filtered
// path of select_filter.cuh): the block and cluster shape, candidates and
// their order, the Gumbel noise, and the loop over a position's logits row.
// Internal; Abseil-free.
#pragma once

#include <curand_kernel.h>

#include <climits>
#include <cstdint>

#include "baton/config.h"
#include "kernels/decode_batch.h"
#include "kernels/decode_kernel_common.cuh"
#include "kernels/select_params.h"

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

// Gumbel noise of the 8 elements [i, i + 8) for (seed, sequence, step): see
// ops::Select's sample for the mapping. The first offset is a multiple of
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

// Calls f(v, x) for every 8-element vector v of the row's first `elements`
// (the vocabulary) that this thread covers: vectors rank * kSelectThreads +
// threadIdx.x, strided by the cluster's threads, with kSelectUnroll 16-byte
// loads issued before any is used. Every pass over a row visits the same
// vectors in the same thread. Rows are padded to whole vectors
// (DecoderConfig::padded_vocab); a last vector's padding reads as -inf, so it
// is never chosen and weighs nothing in any softmax.
template <class T, class F>
__device__ __forceinline__ void for_each_row_vector(const T* row, int elements, F&& f) {
  const int vectors = (elements + kVector - 1) / kVector;
  const cg::cluster_group cluster = cg::this_cluster();
  const int stride = static_cast<int>(cluster.num_blocks()) * kSelectThreads;
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
      if ((v + 1) * kVector > elements) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) {
          if (v * kVector + e >= elements) {
            reinterpret_cast<T*>(&x[j].bits)[e] = Storage<T>::store(-INFINITY);
          }
        }
      }
      f(v, x[j]);
    }
  }
}

// The score token selection maximizes: the logit (NaN as -inf), and with
// Sample, logit / T + g as logit * (1 / T) + g.
template <bool Sample>
__device__ __forceinline__ float select_score(float logit, float inv_temperature, float g) {
  float score = logit;
  if (isnan(score)) score = -INFINITY;
  if (Sample) score = score * inv_temperature + g;
  return score;
}

}  // namespace baton::detail::decode
