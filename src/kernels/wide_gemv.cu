// The wide GEMV's kernels and launcher (kernels/wide_gemv.h).
#include <cstdint>

#include "baton/step_kernel.cuh"
#include "kernels/wide_gemv.h"
#include "kernels/wide_gemv_body.cuh"

namespace baton {
namespace {

using detail::decode::GemvIo;
using detail::decode::GemvOutput;
using detail::decode::kMmaPositions;
using detail::decode::kVector;
using detail::decode::kWideThreads;
using detail::decode::wide_gemv_body;
using detail::decode::wide_gemv_split;
using detail::decode::wide_row_blocks;
using detail::decode::WideGemvShared;

// Two blocks per SM: the split's target grid (wide_gemv_split) is one wave
// of them.
template <class T, GemvOutput Output, int NT>
__global__ void __launch_bounds__(kWideThreads, 2)
    wide_gemv_kernel(const T* w, int out_features, int in_features, GemvIo io, DecodeBatch batch) {
  __shared__ WideGemvShared<NT> shared;
  wide_gemv_body<T, Output, NT>(w, out_features, in_features, io, batch,
                                {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y)},
                                shared);
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Position tiles of 16, 32 or 64: the smallest that holds the bucket (a
// larger bucket takes several tiles of 64, each reading the weights again).
template <class T, GemvOutput Output>
cudaError_t launch(const T* w, int out_features, int in_features, const GemvIo& io,
                   DecodeBatch batch, cudaStream_t stream) {
  const int row_blocks = wide_row_blocks(Output, out_features);
  const int split = wide_gemv_split(row_blocks, in_features);
  const auto go = [&](auto kernel, int positions) {
    const dim3 grid(row_blocks, (batch.capacity + positions - 1) / positions, split);
    return launch_clustered_step_kernel(kernel, grid, dim3(kWideThreads), dim3(1, 1, split), stream,
                                        w, out_features, in_features, io, batch);
  };
  if (batch.capacity <= 2 * kMmaPositions) {
    return go(wide_gemv_kernel<T, Output, 2>, 2 * kMmaPositions);
  }
  if (batch.capacity <= 4 * kMmaPositions) {
    return go(wide_gemv_kernel<T, Output, 4>, 4 * kMmaPositions);
  }
  return go(wide_gemv_kernel<T, Output, 8>, 8 * kMmaPositions);
}

template <class T>
cudaError_t launch_output(GemvOutput output, const T* w, int out_features, int in_features,
                          const GemvIo& io, DecodeBatch batch, cudaStream_t stream) {
  switch (output) {
    case GemvOutput::kStore:
      return launch<T, GemvOutput::kStore>(w, out_features, in_features, io, batch, stream);
    case GemvOutput::kResidualAdd:
      return launch<T, GemvOutput::kResidualAdd>(w, out_features, in_features, io, batch, stream);
    case GemvOutput::kSiluMul:
      return launch<T, GemvOutput::kSiluMul>(w, out_features, in_features, io, batch, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int WideGemvSplit(GemvOutput output, int out_features, int in_features) {
  return wide_gemv_split(wide_row_blocks(output, out_features), in_features);
}

cudaError_t EnqueueWideGemv(DecoderDType dtype, GemvOutput output, const void* w, int out_features,
                            int in_features, const GemvIo& io, DecodeBatch batch,
                            cudaStream_t stream) {
  const bool known = output == GemvOutput::kStore || output == GemvOutput::kResidualAdd ||
                     output == GemvOutput::kSiluMul;
  if (!known || out_features < 1 || in_features < 1 || in_features % kVector != 0 || w == nullptr ||
      !aligned(w) || io.x == nullptr || !aligned(io.x) ||
      !detail::decode::gemv_output_ok(output, io, out_features) || batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (batch.capacity == 0) return cudaSuccess;
  switch (dtype) {
    case DecoderDType::kFloat16:
      return launch_output(output, static_cast<const __half*>(w), out_features, in_features, io,
                           batch, stream);
    case DecoderDType::kBFloat16:
      return launch_output(output, static_cast<const __nv_bfloat16*>(w), out_features, in_features,
                           io, batch, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baton
