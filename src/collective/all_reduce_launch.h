// The all-reduce kernel's launch, for host code (plain C++; the body is in
// collective/all_reduce.cuh). Internal.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "baton/decoder_config.h"

namespace baton::detail {

struct AllReduceView;

// One rank's all-reduce of `vectors` 16-byte vectors on `stream` (its
// device's); in, out 16-byte aligned. Returns the launch's error.
cudaError_t LaunchAllReduce(const AllReduceView& view, const void* in, void* out,
                            std::size_t vectors, DecoderDType dtype, cudaStream_t stream);

}  // namespace baton::detail
