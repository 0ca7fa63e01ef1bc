// A ready-made node for conditional graphs: sets a conditional handle from a
// word in device memory, so a value computed by earlier kernels (a stop flag,
// a bucket index) decides the next IF/WHILE/SWITCH. Plain C++ (no Abseil).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace baton {

// Enqueues a 1-thread kernel: handle = *word (read when it runs).
[[nodiscard]] cudaError_t EnqueueSetConditional(cudaGraphConditionalHandle handle,
                                                const std::uint32_t* word, cudaStream_t stream);

}  // namespace baton
