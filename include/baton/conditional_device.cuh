// Device side of conditional graphs: a kernel inside a conditional graph sets
// the handle that decides the next IF/WHILE/SWITCH. No Abseil; .cu files only.
//
// Set a handle from ONE thread per launch: concurrent cudaGraphSetConditional
// calls on the same handle are undefined behaviour.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace baton {

// IF/WHILE: run the body (again) when `condition` holds.
__device__ inline void set_condition(cudaGraphConditionalHandle handle, bool condition) {
  cudaGraphSetConditional(handle, condition ? 1u : 0u);
}

// SWITCH: run body `index`; an index >= the number of bodies runs none.
__device__ inline void set_switch_index(cudaGraphConditionalHandle handle, std::uint32_t index) {
  cudaGraphSetConditional(handle, index);
}

}  // namespace baton
