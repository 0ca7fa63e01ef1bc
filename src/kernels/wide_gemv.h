// The wide GEMV: the decode projections of buckets of 9 to 64 positions,
// each weight read from memory once whatever the bucket
// (kernels/wide_gemv_body.cuh has the kernel). Plain C++ (no Abseil), like
// the launchers of kernels/decode_kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/decoder_config.h"
#include "kernels/decode_kernels.h"
#include "kernels/gemv_io.h"

namespace baton {

// The most positions one block of the wide GEMV owns (a bucket above it
// reads the weights once per tile of 64).
inline constexpr std::uint32_t kWideGemvMaxBucket = 64;

// y[p] = W · x[p] (+ bias) for the live positions p < *batch.active of
// batch.capacity, W [out_features, in_features] row-major, x [capacity,
// in_features] (GemvInput::kPlain: io.x), fp32 accumulation, with
// GemvOutput's three outputs exactly as EnqueueGemvFused defines them:
// kStore (io.y [capacity, out_features]), kResidualAdd (io.residual fp32
// [capacity, out_features] += the rounded sum) and kSiluMul (a gate | up
// weight, out_features even, no bias; io.y [capacity, out_features / 2]).
//
// Batch invariant across its own launches: y[p] is bit-identical whatever
// the capacity, *active or p (the K split is a function of the shape). Not
// bit-identical to EnqueueGemvFused, whose warps split K another way: the
// decoder runs it only where tokens already depend on the bucket
// (DecoderGemm::kAuto above auto_gemv_max_bucket). Positions >= *active are
// neither read nor written. Launched with programmatic dependent launch
// (DecodeBatch::settled and launch_next_early as for the decode kernels).
//
// cudaErrorInvalidValue, before any launch, for in_features % 8 != 0, sizes
// < 1, W or x null or not 16-byte aligned, y / residual null, a bias not 2-byte
// aligned (or any bias with kSiluMul), an odd kSiluMul width or a null
// batch.active; otherwise the launch's error.
[[nodiscard]] cudaError_t EnqueueWideGemv(DecoderDType dtype, detail::decode::GemvOutput output,
                                          const void* w, int out_features, int in_features,
                                          const detail::decode::GemvIo& io, DecodeBatch batch,
                                          cudaStream_t stream);

// The blocks that split K for a weight of this shape and output (a function
// of the shape alone: the bits depend on it), for tests and notes.
[[nodiscard]] int WideGemvSplit(detail::decode::GemvOutput output, int out_features,
                                int in_features);

}  // namespace baton
