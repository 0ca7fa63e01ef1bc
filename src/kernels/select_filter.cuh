// Token selection's filtered path: top-k and top-p sampling of one position
// by the cluster that serves it (select_body.cuh runs it for a position whose
// temperature > 0 asks for top_k in (0, vocab) or top_p < 1). Internal;
// Abseil-free. The semantics are sample_positions' (ops/select.h).
//
// Exact selection on 16-bit keys. Every stored logit maps to an
// order-preserving 16-bit key (logit_key), so "the K-th largest logit" and
// "the lowest logit whose mass above is < P" are keys, found exactly by two
// levels of 256-bin histograms: the keys' high bytes, then the low bytes of
// keys inside the one high-byte bin where the threshold lies. A token's
// weight exp((x - x_max) / T) depends only on its key, so a bin of the low
// level holds one logit value and its mass is count * weight.
//
// Determinism. Each block counts its share of the row into shared memory with
// integer atomics; masses are 64-bit fixed-point integers (weights rounded to
// multiples of 2^-40, see mass_shift), summed with integer atomics too. Integer
// sums are exact, so their value does not depend on the order the atomics
// land in, nor on how the row is split: a position's thresholds are a
// function of its own row and parameters only (batch invariance). The blocks
// add each other's bins through distributed shared memory (every block reads
// all ranks' copies of its thread's bin), so every block computes the same
// thresholds; then each takes the Gumbel-max of its share of the survivors
// and the cluster's first block reduces them as the plain path does.
//
// Passes over the row (each read from L2 after the first):
//   1. the largest key; with top-k, the high-byte counts.
//   2. with top-k, the low-byte counts inside the K-th key's high-byte bin;
//      with top-p, the high-byte masses of the tokens top-k keeps above that
//      bin (all tokens without top-k).
//   3. with top-p, the low-byte counts of the bin where the mass crosses P,
//      unless it is top-k's bin, whose counts pass 2 already has.
//   4. Gumbel-max over the survivors (Philox only for vectors holding one).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "kernels/select_common.cuh"

namespace baton::detail::decode {

inline constexpr unsigned kKeyBins = 256;  // one byte of a key
static_assert(kSelectThreads == static_cast<int>(kKeyBins), "a thread per histogram bin");

// The 16-bit patterns of the storage types' infinities and their decoding.
template <class T>
struct LogitBits;
template <>
struct LogitBits<__half> {
  static constexpr unsigned kInfinity = 0x7C00u;
  __device__ static float to_float(unsigned short bits) {
    return __half2float(__ushort_as_half(bits));
  }
};
template <>
struct LogitBits<__nv_bfloat16> {
  static constexpr unsigned kInfinity = 0x7F80u;
  __device__ static float to_float(unsigned short bits) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  }
};

// The order-preserving key of a stored logit (sign-magnitude bits): a larger
// logit has a larger key, NaN gets -inf's key and -0 gets +0's, so equal keys
// are equal values and the key order is the greedy rule's value order.
template <class T>
__device__ inline unsigned logit_key(unsigned bits) {
  const unsigned magnitude = bits & 0x7FFFu;
  if (magnitude > LogitBits<T>::kInfinity) bits = 0x8000u | LogitBits<T>::kInfinity;  // NaN
  if (magnitude == 0) bits = 0;                                                       // -0
  return (bits & 0x8000u) != 0 ? ~bits & 0xFFFFu : bits | 0x8000u;
}
// The logit a key stands for (the inverse of logit_key on its image).
template <class T>
__device__ inline float key_logit(unsigned key) {
  const unsigned bits = (key & 0x8000u) != 0 ? key & 0x7FFFu : ~key & 0xFFFFu;
  return LogitBits<T>::to_float(static_cast<unsigned short>(bits));
}
template <class T>
__device__ inline unsigned element_key(const Packed<T, kVector>& x, int e) {
  return logit_key<T>(reinterpret_cast<const unsigned short*>(&x.bits)[e]);
}

// Weights are fixed-point with `shift` fraction bits: 40, fewer only for a
// vocabulary of 2^23 tokens or more, so that vocab * 2^shift (every sum of
// masses, each weight <= 1) stays below 2^63. 2^-41 per token (the rounding)
// is 7e-8 of the mass over 152k tokens, far inside what top-p can resolve in
// fp32 anyway. A function of the vocabulary alone.
__device__ inline int mass_shift(int vocab) {
  const int bits = 32 - __clz(vocab);  // vocab < 2^bits
  return bits <= 23 ? 40 : 63 - bits;
}

// A key's weight exp((x - x_max) / T) as a fixed-point mass. The largest
// key's weight is exactly one (even when x_max is infinite, where x - x_max
// would be NaN); every other key's value is below x_max, so its exponent is
// negative or -inf. Only called for keys <= max_key that occur in the row.
template <class T>
struct KeyMass {
  unsigned max_key;
  float max_logit;
  float inv_temperature;
  int shift;
  __device__ unsigned long long operator()(unsigned key) const {
    if (key == max_key) return 1ull << shift;
    const float w = expf((key_logit<T>(key) - max_logit) * inv_temperature);
    return __float2ull_rn(ldexpf(w, shift));
  }
};

// One block's histograms and scratch. Each pass has its own bins, so no bin
// is rewritten while another block may still read it.
struct FilterShared {
  unsigned high_counts[kKeyBins];            // pass 1 (top-k)
  unsigned top_k_low_counts[kKeyBins];       // pass 2 (top-k)
  unsigned long long high_masses[kKeyBins];  // pass 2 (top-p)
  unsigned top_p_low_counts[kKeyBins];       // pass 3 (top-p)
  unsigned max_key;
  // The request, read between passes: kept here rather than in registers,
  // which the pass loops need (ptxas otherwise spilled the caller's
  // long-lived values, e.g. the decoder model's step-end state).
  std::uint32_t top_k;
  float top_p;
  unsigned long long seed;
  std::uint64_t sequence;
  std::uint32_t step;
  unsigned long long warp_sums[kSelectWarps];
  unsigned chosen;
  unsigned long long chosen_above;
};

// A barrier of the position's whole cluster: every block's shared-memory
// writes before it are visible to every block's reads after it.
__device__ inline void cluster_barrier(bool split) {
  if (split) {
    cg::this_cluster().sync();
  } else {
    __syncthreads();
  }
}

// Thread b's bin summed over the cluster's blocks (their copies of `bins`, in
// rank order), after a cluster_barrier that follows every block's counting.
template <class U>
__device__ U cluster_bin_sum(U* bins, bool split) {
  if (!split) return bins[threadIdx.x];
  const cg::cluster_group cluster = cg::this_cluster();
  U total = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
    total += *cluster.map_shared_rank(bins + threadIdx.x, r);
  }
  return total;
}

// The largest of the cluster's blocks' copies of *value, read as
// cluster_bin_sum reads bins.
__device__ inline unsigned cluster_max(unsigned* value, bool split) {
  if (!split) return *value;
  const cg::cluster_group cluster = cg::this_cluster();
  unsigned m = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
    m = max(m, *cluster.map_shared_rank(value, r));
  }
  return m;
}

// Thread b holds bin b's value; bins are ordered from the top (bin 255, the
// largest keys) down. Returns the sum of the bins above b (b' > b) and of
// all bins. Every thread of the block calls it.
template <class U>
struct SuffixSums {
  U above;
  U total;
};
template <class U>
__device__ SuffixSums<U> suffix_sums(U value, FilterShared& s) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  U inclusive = value;  // this lane's value and the higher lanes'
#pragma unroll
  for (unsigned offset = 1; offset < 32; offset *= 2) {
    const U higher = __shfl_down_sync(0xffffffffu, inclusive, offset);
    if (lane + offset < 32) inclusive += higher;
  }
  __syncthreads();                               // a previous call's readers of warp_sums are done
  if (lane == 0) s.warp_sums[warp] = inclusive;  // the warp's total
  __syncthreads();
  U later = 0, total = 0;
  for (unsigned w = 0; w < kSelectWarps; ++w) {
    const U sum = static_cast<U>(s.warp_sums[w]);
    total += sum;
    if (w > warp) later += sum;
  }
  return {inclusive - value + later, total};
}

// The lowest bin b that holds something (value > 0) and that keep() accepts
// given what lies above it: `above` (the levels above this histogram) plus
// the bins above b. keep() must accept smaller amounts whenever it accepts a
// larger one, so the accepted bins are the top ones and the lowest of them is
// where the threshold lies; .above is what lies above it. Callers guarantee
// that the top nonempty bin is accepted; should none be, bin 0 (keep the
// whole level) is the safe answer. Every thread of the block calls it.
template <class U>
struct KeptBin {
  unsigned bin;
  U above;
};
template <class U, class Keep>
__device__ KeptBin<U> lowest_kept_bin(U value, U above, Keep keep, FilterShared& s) {
  if (threadIdx.x == 0) s.chosen = kKeyBins;  // readers of the last answer passed a barrier since
  const SuffixSums<U> sums = suffix_sums(value, s);  // its barriers publish `chosen`
  const U mine = above + sums.above;
  if (value > 0 && keep(mine)) atomicMin(&s.chosen, threadIdx.x);
  __syncthreads();
  const unsigned bin = s.chosen;
  if (threadIdx.x == bin) s.chosen_above = mine;
  __syncthreads();
  if (bin == kKeyBins) return {0, above};
  return {bin, static_cast<U>(s.chosen_above)};
}

// The position's best survivor (this thread's share; select_body reduces
// them). `gather` is select_body's: its start-of-kernel arrival is consumed
// here and made again before returning, so select_body's send() pairs as on
// the plain path. All blocks of the cluster call this together (the branch
// to it is uniform), and every barrier below is reached by all their threads.
template <class T>
__device__ __forceinline__ Candidate filtered_best(const T* row, int vocab,
                                                   const PositionSampling& request,
                                                   std::uint64_t sequence, std::uint32_t step,
                                                   const ClusterToFirstBlock& gather,
                                                   FilterShared& shared) {
  const unsigned t = threadIdx.x;
  const bool split = gather.split();
  const bool by_k = request.top_k > 0 && request.top_k < static_cast<unsigned>(vocab);
  const bool by_p = request.top_p < 1.0f;  // NaN: off
  const float inv_temperature = 1.0f / request.temperature;
  shared.high_counts[t] = 0;
  shared.top_k_low_counts[t] = 0;
  shared.high_masses[t] = 0;
  shared.top_p_low_counts[t] = 0;
  if (t == 0) {
    shared.max_key = 0;
    shared.top_k = request.top_k;
    shared.top_p = request.top_p;
    shared.seed = request.seed;
    shared.sequence = sequence;
    shared.step = step;
  }
  gather.leave();  // waits for the start-of-kernel arrival: all blocks have started
  __syncthreads();

  // Pass 1: the largest key (for the weights), the high bytes' counts.
  unsigned max_key = 0;
  for_each_row_vector(row, vocab, [&](int, const Packed<T, kVector>& x) {
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      const unsigned key = element_key<T>(x, e);
      max_key = max(max_key, key);
      if (by_k) atomicAdd(&shared.high_counts[key >> 8], 1u);
    }
  });
  max_key = __reduce_max_sync(0xffffffffu, max_key);
  if (t % 32 == 0) atomicMax(&shared.max_key, max_key);
  cluster_barrier(split);
  max_key = cluster_max(&shared.max_key, split);
  const KeyMass<T> mass{max_key, key_logit<T>(max_key), inv_temperature, mass_shift(vocab)};

  // Top-k's threshold bin: the lowest high byte with fewer than K tokens above it.
  const auto keep_k = [&](unsigned above) { return above < shared.top_k; };
  KeptBin<unsigned> bin_k{0, 0};
  if (by_k) bin_k = lowest_kept_bin(cluster_bin_sum(shared.high_counts, split), 0u, keep_k, shared);

  // Pass 2: bin_k's low-byte counts; the masses top-p needs above bin_k.
  const unsigned mass_from = by_k ? bin_k.bin + 1 : 0;
  for_each_row_vector(row, vocab, [&](int, const Packed<T, kVector>& x) {
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      const unsigned key = element_key<T>(x, e);
      if (by_k && key >> 8 == bin_k.bin) atomicAdd(&shared.top_k_low_counts[key & 0xFFu], 1u);
      if (by_p && key >> 8 >= mass_from) {
        const unsigned long long m = mass(key);
        if (m != 0) atomicAdd(&shared.high_masses[key >> 8], m);
      }
    }
  });
  cluster_barrier(split);
  unsigned theta = 0;  // survivors: key >= theta
  unsigned k_low_count = 0;
  if (by_k) {
    k_low_count = cluster_bin_sum(shared.top_k_low_counts, split);
    const KeptBin<unsigned> low = lowest_kept_bin(k_low_count, bin_k.above, keep_k, shared);
    theta = bin_k.bin << 8 | low.bin;  // the K-th largest key
  }
  if (by_p) {
    // Thread b's bin mass; bin_k's holds only the tokens top-k keeps.
    unsigned long long high_mass = cluster_bin_sum(shared.high_masses, split);
    if (by_k) {
      const unsigned key = bin_k.bin << 8 | t;
      const unsigned long long kept =
          key >= theta && k_low_count != 0 ? k_low_count * mass(key) : 0;
      const unsigned long long bin_k_mass = suffix_sums(kept, shared).total;
      if (t == bin_k.bin) high_mass = bin_k_mass;
    }
    const unsigned long long total = suffix_sums(high_mass, shared).total;  // >= mass(max_key)
    // A key group is kept iff the mass above it is < P of the total; the top
    // group (nothing above it) always is.
    const double bound = static_cast<double>(shared.top_p) * static_cast<double>(total);
    const auto keep_p = [bound](unsigned long long above) {
      return above == 0 || static_cast<double>(above) < bound;
    };
    const KeptBin<unsigned long long> bin_p = lowest_kept_bin(high_mass, 0ull, keep_p, shared);
    // bin_p's low-byte counts (>= bin_k's bin: no mass lies below it).
    unsigned p_low_count = 0;
    if (by_k && bin_p.bin == bin_k.bin) {
      p_low_count = (bin_k.bin << 8 | t) >= theta ? k_low_count : 0;
    } else {
      // Pass 3 (uniform: every block found the same bin_p).
      for_each_row_vector(row, vocab, [&](int, const Packed<T, kVector>& x) {
#pragma unroll
        for (int e = 0; e < kVector; ++e) {
          const unsigned key = element_key<T>(x, e);
          if (key >> 8 == bin_p.bin) atomicAdd(&shared.top_p_low_counts[key & 0xFFu], 1u);
        }
      });
      cluster_barrier(split);
      p_low_count = cluster_bin_sum(shared.top_p_low_counts, split);
    }
    const unsigned key = bin_p.bin << 8 | t;
    const unsigned long long low_mass = p_low_count != 0 ? p_low_count * mass(key) : 0;
    const KeptBin<unsigned long long> low = lowest_kept_bin(low_mass, bin_p.above, keep_p, shared);
    theta = max(theta, bin_p.bin << 8 | low.bin);
  }

  // Pass 4: the Gumbel-max of the survivors, scored exactly as the plain path.
  Candidate best{-INFINITY, INT_MAX};
  const BetterCandidate better;
  for_each_row_vector(row, vocab, [&](int v, const Packed<T, kVector>& x) {
    unsigned keys[kVector];
    bool any = false;
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      keys[e] = element_key<T>(x, e);
      any = any || keys[e] >= theta;
    }
    if (!any) return;
    float g[kVector];
    gumbel8(shared.seed, shared.sequence, shared.step, vocab, v * kVector, g);
#pragma unroll
    for (int e = 0; e < kVector; ++e) {
      if (keys[e] < theta) continue;
      best =
          better(best, Candidate{select_score<true>(x[e], inv_temperature, g[e]), v * kVector + e});
    }
  });
  // Re-arm the gather. Every remote read of this block's bins happened before
  // its reader arrives here, and the gather's barrier follows, so no block
  // exits while another still reads its shared memory.
  if (split) cg::this_cluster().barrier_arrive();
  return best;
}

}  // namespace baton::detail::decode
