#include "baton/conditional_device.cuh"
#include "baton/set_conditional.h"

namespace baton {
namespace {

__global__ void set_conditional_from_word(cudaGraphConditionalHandle handle,
                                          const std::uint32_t* word) {
  set_switch_index(handle, *word);
}

}  // namespace

cudaError_t EnqueueSetConditional(cudaGraphConditionalHandle handle, const std::uint32_t* word,
                                  cudaStream_t stream) {
  set_conditional_from_word<<<1, 1, 0, stream>>>(handle, word);
  return cudaGetLastError();
}

}  // namespace baton
