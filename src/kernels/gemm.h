// The runtime's own GEMM (kernels/gemm_body.cuh): the projections of a step
// that holds many token rows (a prefill chunk), where EnqueueGemvFused's
// 8-position tiles would read every weight once per 8 rows. Plain C++ (no
// Abseil), like the launchers of kernels/decode_kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/decoder_config.h"
#include "kernels/decode_kernels.h"
#include "kernels/gemv_io.h"

namespace baton {

// The block tiles of the GEMM, rows x output features x the K columns of a
// pipeline stage. Every tile gives the same bits (gemm_body.cuh: one
// accumulation order per element), so the launcher chooses from the launch's
// size alone.
enum class GemmTileShape : std::uint32_t { k128x256x64, k128x128x64, k64x128x64, k32x128x64 };
inline constexpr GemmTileShape kGemmTileShapes[] = {
    GemmTileShape::k128x256x64, GemmTileShape::k128x128x64, GemmTileShape::k64x128x64,
    GemmTileShape::k32x128x64};

// The tile EnqueueGemm launches for `capacity` rows of `out_features`
// outputs: the least estimated time over one H100's SMs (gemm_body.cuh:
// gemm_tile_shape).
[[nodiscard]] GemmTileShape GemmTileFor(int out_features, std::uint32_t capacity);

// y[r] = W · x[r] (+ bias) for the live rows r < *batch.active of
// batch.capacity. W [out_features, in_features] row-major (a PyTorch Linear
// weight), x [capacity, in_features], y [capacity, out_features], all in
// `dtype`; fp32 accumulation. output == kStore: y = round(W·x + bias);
// kResidualAdd: residual[r][o] += round_to_dtype(W·x + bias) (residual fp32
// [capacity, out_features]), exactly GemvOutput's semantics. io.x, io.y /
// io.residual, io.bias (optional [out]) as in GemvIo (plain inputs only).
//
// Row invariant: y[r] is bit-identical whatever the capacity, *active, the
// other rows and the tile. Rows >= *active are neither read nor written.
// Launched with programmatic dependent launch (DecodeBatch::settled and
// launch_next_early as for the decode kernels; x and the residual are read
// after the wait in any case).
//
// cudaErrorInvalidValue, before any launch, for in_features % 8 != 0, sizes
// < 1 (capacity 0 included), W, x, y or residual null or not 16-byte
// aligned, a bias not 2-byte aligned, a null batch.active, or a grid past
// CUDA's limits; otherwise the launch's error.
[[nodiscard]] cudaError_t EnqueueGemm(DecoderDType dtype, detail::decode::GemvOutput output,
                                      const void* w, int out_features, int in_features,
                                      const detail::decode::GemvIo& io, DecodeBatch batch,
                                      cudaStream_t stream);

// EnqueueGemm with a given tile instead of GemmTileFor's (tests and
// benchmarks: every tile gives the same bits).
[[nodiscard]] cudaError_t EnqueueGemmTiled(GemmTileShape tile, DecoderDType dtype,
                                           detail::decode::GemvOutput output, const void* w,
                                           int out_features, int in_features,
                                           const detail::decode::GemvIo& io, DecodeBatch batch,
                                           cudaStream_t stream);

}  // namespace baton
