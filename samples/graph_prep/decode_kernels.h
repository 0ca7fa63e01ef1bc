// The non-GEMM kernels of graph_prep's decode step (FP16 activations), behind
// a plain C++ interface (the sample's main uses Abseil, which stays out of .cu
// files). They stand in for a real step's kernels with the same launch shapes;
// the attention mix is elementwise, not real attention.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/bucket_entry.h"

namespace baton::samples {

// y[t, :] = x[t, :] / rms(x[t, :]) * gamma, one block per token. Halves are
// passed as raw 16-bit storage.
[[nodiscard]] cudaError_t EnqueueRmsNorm(const void* x, const void* gamma, void* y, int tokens,
                                         int hidden, cudaStream_t stream);
// out[t, j] = q * sigmoid(k) + v with q, k, v the three thirds of qkv[t, :].
[[nodiscard]] cudaError_t EnqueueAttentionMix(const void* qkv, void* out, int tokens, int hidden,
                                              cudaStream_t stream);
// x += delta over n halves.
[[nodiscard]] cudaError_t EnqueueResidualAdd(void* x, const void* delta, int n,
                                             cudaStream_t stream);
// next[t] = argmax_j logits[t, j], one block per token.
[[nodiscard]] cudaError_t EnqueueArgmax(const void* logits, std::int32_t* next, int tokens,
                                        int vocab, cudaStream_t stream);
// Fills n halves with a deterministic pseudo-random pattern in [-scale, scale].
[[nodiscard]] cudaError_t EnqueueFillRandom(void* data, std::size_t n, std::uint32_t seed,
                                            float scale, cudaStream_t stream);
// A 1-thread scheduler: tail-launches the bucket graph for *batch. Must run in a graph.
[[nodiscard]] cudaError_t EnqueueLaunchBucket(DeviceBucketTable table, const std::uint32_t* batch,
                                              std::uint32_t* error_word, cudaStream_t stream);

}  // namespace baton::samples
