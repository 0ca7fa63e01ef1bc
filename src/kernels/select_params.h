// Token selection's shape and parameters (kernels/select_body.cuh): its
// block, the cluster of blocks per position (a function of the vocabulary
// alone) and the sampling parameters a launch reads. Plain C++, for the
// op's launch shape (ops/select.h) on the host and the body on the device.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "baton/decoder_config.h"
#include "kernels/decode_batch.h"

namespace baton::detail::decode {

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

// Token selection's parameters: one set for every position (ops::Select's
// argmax and sample), or, when `positions` is set, positions[p] for position
// p (sample_positions, and the decoder's step end; device memory, indexed by
// batch position). Built implicitly from a SamplingParams.
struct SelectParams {
  PositionSampling uniform;
  const PositionSampling* positions = nullptr;

  BATON_HOST_DEVICE SelectParams() {}               // greedy
  BATON_HOST_DEVICE SelectParams(SamplingParams s,  // NOLINT: implicit on purpose
                                 const PositionSampling* per_position = nullptr)
      : uniform{s.temperature, s.top_k, s.top_p, 0, 0, s.seed}, positions(per_position) {}

  // Position p's parameters; every thread of p's cluster loads the same ones,
  // so the branches taken on them are uniform across the cluster.
  BATON_HOST_DEVICE PositionSampling at(std::uint32_t p) const {
    return positions != nullptr ? positions[p] : uniform;
  }
};

}  // namespace baton::detail::decode
