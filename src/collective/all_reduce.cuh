// The one-shot exchange over peer memory that the all-reduce and the
// gather of tensor parallelism share (baton/peer_group.h says what it
// promises), as bodies in the op table's style: the caller gives the block
// (its tile) and the shared memory, so PeerGroup's own kernel and the step's
// op (ops/all_reduce.h) run the same code. Internal; Abseil-free. The flag
// protocol follows the custom all-reduce of vLLM and TensorRT-LLM (a flag
// per block and peer, written with a release store at system scope after
// the block's staging writes, read with acquire loads); the fixed rank
// order of the sum is Baton's (bit-identical ranks).
#pragma once

#include <cuda/atomic>
#include <cuda/ptx>

#include <cstddef>
#include <cstdint>

#include "baton/peer_group.h"
#include "collective/all_reduce_view.h"
#include "kernels/decode_kernel_common.cuh"

namespace baton::detail {

// What a block of the exchange keeps in its caller's shared memory.
struct PeerExchangeShared {
  std::uint32_t call;
  bool gave_up;
};

// Block b (of v.blocks) of one rank's exchange of `vectors` 16-byte vectors:
// its slice of `in` goes into its own staging half (the call's parity),
// every rank is signalled and waited for, then `consume(i, x)` runs for each
// vector i of the slice with x[q] = rank q's vector i (all ranks' loads in
// flight together, from L2: peer memory is not coherent in this SM's L1).
// Every rank must make the same calls with the same `vectors`. A rank whose
// fault word is set (a wait of an earlier call gave up) skips the exchange,
// so a broken group costs one timeout, not one per call; false then, and
// when this wait gives up (the outputs are left unwritten).
template <class Consume>
__device__ bool peer_exchange(const AllReduceView& v, const uint4* in, std::size_t vectors,
                              unsigned b, PeerExchangeShared& shared, Consume&& consume) {
  if (threadIdx.x == 0) {
    shared.gave_up = *static_cast<volatile std::uint32_t*>(v.fault) != 0;
    shared.call = v.calls[b] + 1;  // only this block of this rank touches its counter
    if (!shared.gave_up) v.calls[b] = shared.call;
  }
  __syncthreads();
  if (shared.gave_up) return false;
  const std::uint32_t call = shared.call;
  const std::size_t half = static_cast<std::size_t>(call & 1u) * v.blocks * v.region_vectors;
  const std::size_t region = half + static_cast<std::size_t>(b) * v.region_vectors;
  std::size_t begin, end;
  all_reduce_slice(vectors, v.blocks, b, begin, end);
  // 1. This rank's slice into its own staging.
  uint4* mine = v.staging[v.rank] + region;
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine[i - begin] = in[i];
  __syncthreads();
  // 2. Signal every rank (itself too), then wait for every rank's signal.
  if (threadIdx.x < v.ranks) {
    cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system> flag(
        v.flags[threadIdx.x][b * kMaxPeerRanks + v.rank]);
    flag.store(call, cuda::memory_order_release);
    cuda::atomic_ref<std::uint32_t, cuda::thread_scope_system> theirs(
        v.flags[v.rank][b * kMaxPeerRanks + threadIdx.x]);
    const unsigned long long start = cuda::ptx::get_sreg_globaltimer();
    // A peer may already be at the next call (>=, wrap-safe).
    while (static_cast<std::int32_t>(theirs.load(cuda::memory_order_acquire) - call) < 0) {
      if (cuda::ptx::get_sreg_globaltimer() - start > v.wait_ns) {
        shared.gave_up = true;
        atomicExch(v.fault, 1u);
        break;
      }
    }
  }
  __syncthreads();
  if (shared.gave_up) return false;
  // 3. Every rank's vector i, loaded before any is used.
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    uint4 x[kMaxPeerRanks];
#pragma unroll
    for (std::uint32_t q = 0; q < kMaxPeerRanks; ++q) {
      if (q < v.ranks) x[q] = __ldcg(v.staging[q] + region + (i - begin));
    }
    consume(i, x);
  }
  return true;
}

// The ranks' vectors summed in rank order, in float.
template <class T>
__device__ inline void sum_in_rank_order(const AllReduceView& v, const uint4 (&x)[kMaxPeerRanks],
                                         float (&acc)[decode::kVector]) {
  using Vector = decode::Packed<T, decode::kVector>;  // 16 bytes
#pragma unroll
  for (int e = 0; e < decode::kVector; ++e) acc[e] = 0.0f;
#pragma unroll
  for (std::uint32_t q = 0; q < kMaxPeerRanks; ++q) {
    if (q >= v.ranks) continue;
    const Vector y{x[q]};
#pragma unroll
    for (int e = 0; e < decode::kVector; ++e) acc[e] += y[e];
  }
}

// One rank's block b of an all-reduce of `vectors` 16-byte vectors of T:
// out = the ranks' sum (in == out allowed: every rank's slice is staged
// before any output is written).
template <class T>
__device__ void all_reduce_body(const AllReduceView& v, const uint4* in, uint4* out,
                                std::size_t vectors, unsigned b, PeerExchangeShared& shared) {
  peer_exchange(v, in, vectors, b, shared, [&](std::size_t i, const uint4(&x)[kMaxPeerRanks]) {
    float acc[decode::kVector];
    sum_in_rank_order<T>(v, x, acc);
    decode::store_packed<T, decode::kVector>(reinterpret_cast<T*>(out + i), acc);
  });
}

}  // namespace baton::detail
