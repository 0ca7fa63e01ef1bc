// EnqueueChunkAttention (kernels/chunk_attention.h): the graph path's
// __global__ wrapper around chunk_attention_body and its launcher. A
// dynamic-parallelism step compiles the same body with a wrapper of its own.
#include <cstdint>

#include "baton/step_kernel.cuh"
#include "kernels/chunk_attention.h"
#include "kernels/chunk_attention_body.cuh"

namespace baton {
namespace {

using detail::chunk::ChunkAttentionShared;
using detail::chunk::kMaxHeadDim;
using detail::chunk::kMinHeadDim;
using detail::chunk::kSharedBytes;
using detail::chunk::kThreads;

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
    chunk_attention_kernel(DecoderConfig config, const T* qkv, KvCacheLayer cache,
                           ChunkAttentionBatch batch, T* out) {
  extern __shared__ __align__(16) unsigned char chunk_shared[];
  detail::chunk::chunk_attention_body<T, D>(
      config, qkv, cache, batch, out, *reinterpret_cast<ChunkAttentionShared<T, D>*>(chunk_shared));
}

// The kernel's dynamic shared memory is past the 48 KB default: opted in at
// every launch (a host-side setting of the current device, allowed during
// stream capture; a dynamic-parallelism wrapper needs the same for itself).
template <class T, int D>
cudaError_t launch(const DecoderConfig& config, const void* qkv, KvCacheLayer cache,
                   const ChunkAttentionBatch& batch, void* out, cudaStream_t stream) {
  const cudaError_t opted_in = cudaFuncSetAttribute(chunk_attention_kernel<T, D>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(kSharedBytes<T, D>));
  if (opted_in != cudaSuccess) return opted_in;
  return launch_step_kernel(chunk_attention_kernel<T, D>,
                            chunk_attention_grid(config, batch.capacity, batch.rows),
                            dim3(kThreads), kSharedBytes<T, D>, stream, config,
                            static_cast<const T*>(qkv), cache, batch, static_cast<T*>(out));
}

template <class T>
struct Launch {
  const DecoderConfig& config;
  const void* qkv;
  KvCacheLayer cache;
  const ChunkAttentionBatch& batch;
  void* out;
  cudaStream_t stream;
  template <int D>
  cudaError_t operator()() const {
    return launch<T, D>(config, qkv, cache, batch, out, stream);
  }
};

bool aligned(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t EnqueueChunkAttention(const DecoderConfig& config, const void* qkv, KvCacheLayer cache,
                                  ChunkAttentionBatch batch, void* out, cudaStream_t stream) {
  // Checked before any launch, so a refusal leaves no error behind.
  if (config.head_dim < kMinHeadDim || config.head_dim > kMaxHeadDim || config.head_dim % 16 != 0 ||
      config.heads <= 0 || config.kv_heads < 0 || config.heads % config.key_value_heads() != 0 ||
      config.max_context <= 0 || config.key_value_heads() > 65535) {
    return cudaErrorInvalidValue;
  }
  if (qkv == nullptr || out == nullptr || cache.keys == nullptr || cache.values == nullptr ||
      batch.active == nullptr || batch.tokens == nullptr || batch.first_row == nullptr ||
      batch.slots == nullptr || batch.start == nullptr || batch.capacity == 0) {
    return cudaErrorInvalidValue;
  }
  if (!aligned(qkv) || !aligned(out) || !aligned(cache.keys) || !aligned(cache.values)) {
    return cudaErrorInvalidValue;
  }
  const unsigned long long tiles =
      (static_cast<unsigned long long>(batch.rows) * config.group_size() +
       detail::chunk::kTileRows - 1) /
          detail::chunk::kTileRows +
      batch.capacity;
  if (tiles > 0x7fffffffull) return cudaErrorInvalidValue;
  switch (config.dtype) {
    case DecoderDType::kFloat16:
      return detail::chunk::with_head_dim(config.head_dim,
                                          Launch<__half>{config, qkv, cache, batch, out, stream});
    case DecoderDType::kBFloat16:
      return detail::chunk::with_head_dim(
          config.head_dim, Launch<__nv_bfloat16>{config, qkv, cache, batch, out, stream});
  }
  return cudaErrorInvalidValue;
}

}  // namespace baton
