// The one-shot all-reduce over peer memory (baton/peer_group.h says what it
// promises): the view one rank's kernel reads and its body. Internal;
// Abseil-free. The flag protocol follows the custom all-reduce of vLLM and
// TensorRT-LLM (a flag per block and peer, written with a release store at
// system scope after the block's staging writes, read with acquire loads);
// the fixed rank order of the sum is Baton's (bit-identical ranks).
#pragma once

#include <cuda/atomic>
#include <cuda/ptx>

#include <cstddef>
#include <cstdint>

#include "baton/peer_group.h"
#include "collective/all_reduce_view.h"
#include "kernels/decode_kernel_common.cuh"

namespace baton::detail {

// One rank's block b of an all-reduce of `vectors` 16-byte vectors of T.
template <class T>
__device__ void all_reduce_body(const AllReduceView& v, const uint4* in, uint4* out,
                                std::size_t vectors) {
  const unsigned b = blockIdx.x;
  __shared__ std::uint32_t call_shared;
  __shared__ bool gave_up;
  if (threadIdx.x == 0) {
    call_shared = v.calls[b] + 1;  // only this block of this rank touches its counter
    v.calls[b] = call_shared;
    gave_up = false;
  }
  __syncthreads();
  const std::uint32_t call = call_shared;
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
        gave_up = true;
        atomicExch(v.fault, 1u);
        break;
      }
    }
  }
  __syncthreads();
  if (gave_up) return;
  // 3. The sum of every rank's slice, in rank order, from L2 (peer memory is
  // not coherent in this SM's L1). Every rank's vector is loaded before any
  // is added, so the peers' loads are in flight together (one NVLink round
  // trip, not one per rank).
  using Vector = decode::Packed<T, decode::kVector>;  // 16 bytes
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    Vector x[kMaxPeerRanks];
#pragma unroll
    for (std::uint32_t q = 0; q < kMaxPeerRanks; ++q) {
      if (q < v.ranks) x[q] = Vector{__ldcg(v.staging[q] + region + (i - begin))};
    }
    float acc[decode::kVector] = {};
#pragma unroll
    for (std::uint32_t q = 0; q < kMaxPeerRanks; ++q) {
      if (q >= v.ranks) continue;
#pragma unroll
      for (int e = 0; e < decode::kVector; ++e) acc[e] += x[q][e];
    }
    decode::store_packed<T, decode::kVector>(reinterpret_cast<T*>(out + i), acc);
  }
}

}  // namespace baton::detail
