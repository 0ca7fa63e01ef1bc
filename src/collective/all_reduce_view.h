// The one-shot all-reduce's layout (collective/all_reduce.cuh): the view
// one rank's kernel reads, for the host that builds it (PeerGroup) and the
// device. Plain C++; internal.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "baton/config.h"
#include "baton/peer_group.h"

namespace baton::detail {

// Blocks per all-reduce: a grid fixed for the group (PeerGroupOptions::
// blocks, at most kMaxAllReduceBlocks), so that block b's slice of staging,
// its flags and its call counter are its own in every call whatever the
// count (a block with an empty slice still takes part in the barrier).
inline constexpr int kMaxAllReduceBlocks = 32;
inline constexpr int kAllReduceThreads = 512;

// One rank's view of the group (by value in the kernel's arguments).
struct AllReduceView {
  // Every rank's staging ([2 parities][blocks][region_vectors] 16-byte
  // vectors) and flags ([kMaxAllReduceBlocks][kMaxPeerRanks]: block b's flag
  // from rank q), indexed by rank.
  uint4* staging[kMaxPeerRanks] = {};
  std::uint32_t* flags[kMaxPeerRanks] = {};
  std::uint32_t* calls = nullptr;  // this rank's: [kMaxAllReduceBlocks] calls made by each block
  std::uint32_t* fault = nullptr;  // this rank's: nonzero once a wait gave up
  std::uint32_t rank = 0;
  std::uint32_t ranks = 0;
  std::uint32_t blocks = 0;  // the grid
  std::size_t region_vectors = 0;         // per block and parity: ceil(max vectors / blocks)
  unsigned long long wait_ns = 0;         // a wait longer than this gives up
};

// Slice [begin, end) of `vectors` for block b of `blocks` (contiguous, the
// same on every rank).
BATON_HOST_DEVICE inline void all_reduce_slice(std::size_t vectors, unsigned blocks, unsigned b,
                                               std::size_t& begin, std::size_t& end) {
  const std::size_t per = (vectors + blocks - 1) / blocks;
  begin = per * b < vectors ? per * b : vectors;
  end = begin + per < vectors ? begin + per : vectors;
}

}  // namespace baton::detail
