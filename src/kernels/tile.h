// The block a kernel body works on, handed to it by its caller (CUB's
// TempStorage idea applied to the grid): a body reads its coordinates from
// here and its shared memory from a reference its caller provides, never
// from blockIdx, gridDim or a static __shared__ of its own. So one body
// serves every launch path: the graph path's and the device step's generic
// kernels (src/ops/op_kernel.cuh) pass blockIdx and gridDim, and a resident
// grid that walks a step's ops could pass the tile its work counter gave it.
// Plain data; host and device.
#pragma once

#include <cstdint>

namespace baton::detail {

struct Tile {
  std::uint32_t x = 0, y = 0, z = 0;     // this block's coordinates in its op's grid
  std::uint32_t nx = 1, ny = 1, nz = 1;  // the grid's extent
};

}  // namespace baton::detail
