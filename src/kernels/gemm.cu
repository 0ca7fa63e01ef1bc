// The graph path's launches of the GEMM body (gemm_body.cuh): one __global__
// wrapper per storage type, output and tile, launched with programmatic
// dependent launch.
#include "kernels/gemm.h"

#include <cstdint>

#include "baton/step_kernel.cuh"
#include "kernels/gemm_body.cuh"

namespace baton {
namespace {

using detail::decode::gemm_body;
using detail::decode::gemm_grid;
using detail::decode::GemmTileOf;
using detail::decode::GemvIo;
using detail::decode::GemvOutput;

template <class T, GemvOutput Output, class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kMinBlocks)
    gemm_kernel(const T* w, int out_features, int in_features, GemvIo io, DecodeBatch batch) {
  extern __shared__ __align__(128) char shared[];
  gemm_body<T, Output, Tile>(w, out_features, in_features, io, batch, shared);
}

bool aligned16(const void* ptr) {
  return ptr != nullptr && reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
}

template <class T, GemvOutput Output, class Tile>
cudaError_t launch(const void* w, int out_features, int in_features, const GemvIo& io,
                   DecodeBatch batch, cudaStream_t stream) {
  const auto kernel = gemm_kernel<T, Output, Tile>;
  // Past 48 KB a kernel must opt in to its dynamic shared memory, once.
  static const cudaError_t opt_in =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSharedBytes);
  if (opt_in != cudaSuccess) return opt_in;
  return launch_step_kernel(kernel, gemm_grid<Tile>(out_features, batch.capacity),
                            dim3(Tile::kThreads), Tile::kSharedBytes, stream,
                            static_cast<const T*>(w), out_features, in_features, io, batch);
}

template <class T, class Tile>
cudaError_t launch_output(GemvOutput output, const void* w, int out_features, int in_features,
                          const GemvIo& io, DecodeBatch batch, cudaStream_t stream) {
  return output == GemvOutput::kStore
             ? launch<T, GemvOutput::kStore, Tile>(w, out_features, in_features, io, batch, stream)
             : launch<T, GemvOutput::kResidualAdd, Tile>(w, out_features, in_features, io, batch,
                                                         stream);
}

template <class Tile>
cudaError_t launch_dtype(DecoderDType dtype, GemvOutput output, const void* w, int out_features,
                         int in_features, const GemvIo& io, DecodeBatch batch,
                         cudaStream_t stream) {
  switch (dtype) {
    case DecoderDType::kFloat16:
      return launch_output<__half, Tile>(output, w, out_features, in_features, io, batch, stream);
    case DecoderDType::kBFloat16:
      return launch_output<__nv_bfloat16, Tile>(output, w, out_features, in_features, io, batch,
                                                stream);
  }
  return cudaErrorInvalidValue;
}

// Everything EnqueueGemm refuses, checked before any launch.
bool valid(DecoderDType dtype, GemvOutput output, const void* w, int out_features, int in_features,
           const GemvIo& io, const DecodeBatch& batch) {
  if (dtype != DecoderDType::kFloat16 && dtype != DecoderDType::kBFloat16) return false;
  if (output != GemvOutput::kStore && output != GemvOutput::kResidualAdd) return false;
  if (out_features < 1 || in_features < 1 || in_features % 8 != 0) return false;
  if (batch.active == nullptr || batch.capacity == 0) return false;
  if (!aligned16(w) || !aligned16(io.x)) return false;
  if (!aligned16(output == GemvOutput::kStore ? io.y : io.residual)) return false;
  if (reinterpret_cast<std::uintptr_t>(io.bias) % 2 != 0) return false;
  // gridDim.y (feature tiles of the narrowest tile) and int row indexing.
  constexpr int kNarrowest = 128;  // every tile's kN is 128 or more
  if ((out_features + kNarrowest - 1) / kNarrowest > 65535) return false;
  return batch.capacity <= 0x7FFFFFFFu - 256;
}

}  // namespace

GemmTileShape GemmTileFor(int out_features, std::uint32_t capacity) {
  return detail::decode::gemm_tile_shape(out_features, capacity);
}

cudaError_t EnqueueGemmTiled(GemmTileShape tile, DecoderDType dtype, GemvOutput output,
                             const void* w, int out_features, int in_features, const GemvIo& io,
                             DecodeBatch batch, cudaStream_t stream) {
  if (!valid(dtype, output, w, out_features, in_features, io, batch)) {
    return cudaErrorInvalidValue;
  }
  switch (tile) {
#define BATON_GEMM_CASE(NAME)                                                                  \
  case GemmTileShape::NAME:                                                                    \
    return launch_dtype<GemmTileOf<GemmTileShape::NAME>::type>(dtype, output, w, out_features, \
                                                               in_features, io, batch, stream);
    BATON_GEMM_CASE(k128x256x64)
    BATON_GEMM_CASE(k128x128x64)
    BATON_GEMM_CASE(k64x128x64)
    BATON_GEMM_CASE(k32x128x64)
#undef BATON_GEMM_CASE
  }
  return cudaErrorInvalidValue;
}

cudaError_t EnqueueGemm(DecoderDType dtype, GemvOutput output, const void* w, int out_features,
                        int in_features, const GemvIo& io, DecodeBatch batch, cudaStream_t stream) {
  return EnqueueGemmTiled(GemmTileFor(out_features, batch.capacity), dtype, output, w, out_features,
                          in_features, io, batch, stream);
}

}  // namespace baton
