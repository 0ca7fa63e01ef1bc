#include <cuda_fp16.h>

#include <cub/block/block_reduce.cuh>

#include "baton/device_launch.cuh"
#include "graph_prep/decode_kernels.h"

namespace baton::samples {
namespace {

constexpr int kThreads = 256;

__global__ void rms_norm(const __half* x, const __half* gamma, __half* y, int hidden) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage storage;
  __shared__ float inverse_rms;
  const __half* row = x + static_cast<std::size_t>(blockIdx.x) * hidden;
  float sum = 0;
  for (int j = threadIdx.x; j < hidden; j += kThreads) {
    const float v = __half2float(row[j]);
    sum += v * v;
  }
  const float total = BlockReduce(storage).Sum(sum);
  if (threadIdx.x == 0) inverse_rms = rsqrtf(total / hidden + 1e-6f);
  __syncthreads();
  __half* out = y + static_cast<std::size_t>(blockIdx.x) * hidden;
  for (int j = threadIdx.x; j < hidden; j += kThreads) {
    out[j] = __float2half(__half2float(row[j]) * inverse_rms * __half2float(gamma[j]));
  }
}

__global__ void attention_mix(const __half* qkv, __half* out, int tokens, int hidden) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= tokens * hidden) return;
  const int t = i / hidden;
  const int j = i % hidden;
  const __half* row = qkv + static_cast<std::size_t>(t) * 3 * hidden;
  const float q = __half2float(row[j]);
  const float k = __half2float(row[hidden + j]);
  const float v = __half2float(row[2 * hidden + j]);
  out[i] = __float2half(q / (1.0f + __expf(-k)) + v);
}

__global__ void residual_add(__half* x, const __half* delta, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hadd(x[i], delta[i]);
}

struct ArgmaxPair {
  float value;
  int index;
};
struct ArgmaxOp {
  __device__ ArgmaxPair operator()(const ArgmaxPair& a, const ArgmaxPair& b) const {
    return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
  }
};

__global__ void argmax(const __half* logits, std::int32_t* next, int vocab) {
  using BlockReduce = cub::BlockReduce<ArgmaxPair, kThreads>;
  __shared__ typename BlockReduce::TempStorage storage;
  const __half* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
  ArgmaxPair best{-INFINITY, 0x7fffffff};
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    best = ArgmaxOp{}(best, ArgmaxPair{__half2float(row[j]), j});
  }
  const ArgmaxPair result = BlockReduce(storage).Reduce(best, ArgmaxOp{});
  if (threadIdx.x == 0) next[blockIdx.x] = result.index;
}

__global__ void fill_random(__half* data, std::size_t n, std::uint32_t seed, float scale) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const float unit = (h & 0xffffff) / 8388608.0f - 1.0f;
  data[i] = __float2half(unit * scale);
}

__global__ void launch_bucket(DeviceBucketTable table, const std::uint32_t* batch,
                              std::uint32_t* error_word) {
  const int index = table.choose(*batch);
  if (index < 0) {
    record_device_error(error_word, DeviceErrorSite::kSchedulerState, 1);
    return;
  }
  (void)tail_launch(table.entries[index].exec, error_word);
}

int Blocks(std::size_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t EnqueueRmsNorm(const void* x, const void* gamma, void* y, int tokens, int hidden,
                           cudaStream_t stream) {
  rms_norm<<<tokens, kThreads, 0, stream>>>(static_cast<const __half*>(x),
                                            static_cast<const __half*>(gamma),
                                            static_cast<__half*>(y), hidden);
  return cudaGetLastError();
}

cudaError_t EnqueueAttentionMix(const void* qkv, void* out, int tokens, int hidden,
                                cudaStream_t stream) {
  attention_mix<<<Blocks(std::size_t(tokens) * hidden), kThreads, 0, stream>>>(
      static_cast<const __half*>(qkv), static_cast<__half*>(out), tokens, hidden);
  return cudaGetLastError();
}

cudaError_t EnqueueResidualAdd(void* x, const void* delta, int n, cudaStream_t stream) {
  residual_add<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__half*>(x),
                                                   static_cast<const __half*>(delta), n);
  return cudaGetLastError();
}

cudaError_t EnqueueArgmax(const void* logits, std::int32_t* next, int tokens, int vocab,
                          cudaStream_t stream) {
  argmax<<<tokens, kThreads, 0, stream>>>(static_cast<const __half*>(logits), next, vocab);
  return cudaGetLastError();
}

cudaError_t EnqueueFillRandom(void* data, std::size_t n, std::uint32_t seed, float scale,
                              cudaStream_t stream) {
  fill_random<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__half*>(data), n, seed, scale);
  return cudaGetLastError();
}

cudaError_t EnqueueLaunchBucket(DeviceBucketTable table, const std::uint32_t* batch,
                                std::uint32_t* error_word, cudaStream_t stream) {
  launch_bucket<<<1, 1, 0, stream>>>(table, batch, error_word);
  return cudaGetLastError();
}

}  // namespace baton::samples
