// The all-reduce kernel (collective/all_reduce.cuh's body) and its launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "collective/all_reduce.cuh"
#include "collective/all_reduce_launch.h"

namespace baton::detail {
namespace {

template <class T>
__global__ void __launch_bounds__(kAllReduceThreads)
    all_reduce_kernel(AllReduceView view, const uint4* in, uint4* out, std::size_t vectors) {
  __shared__ PeerExchangeShared shared;
  all_reduce_body<T>(view, in, out, vectors, blockIdx.x, shared);
}

}  // namespace

cudaError_t LaunchAllReduce(const AllReduceView& view, const void* in, void* out,
                            std::size_t vectors, DecoderDType dtype, cudaStream_t stream) {
  const dim3 grid(view.blocks), block(kAllReduceThreads);
  const auto* source = static_cast<const uint4*>(in);
  auto* target = static_cast<uint4*>(out);
  switch (dtype) {
    case DecoderDType::kBFloat16:
      all_reduce_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(view, source, target, vectors);
      break;
    case DecoderDType::kFloat16:
      all_reduce_kernel<__half><<<grid, block, 0, stream>>>(view, source, target, vectors);
      break;
  }
  return cudaGetLastError();
}

}  // namespace baton::detail
