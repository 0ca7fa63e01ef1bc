// The ops' kernels, generic over the op table: one __global__ template whose
// body is the op's run() with this block's tile and the launch's dynamic
// shared memory, and its twin with compile-time thread-block clusters (a
// device launch carries no launch attributes, so a clustered op launched
// from the device takes its cluster from __cluster_dims__, one instantiation
// per size). `Launch` names the driver, so the host driver's kernels and the
// device step's (another device link) are distinct instantiations: each
// link registers and opts in its own. Internal; Abseil-free.
#pragma once

#include <mutex>

#include "ops/op.h"

namespace baton::ops {

__device__ __forceinline__ Tile block_tile() {
  return Tile{blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z};
}

// The launch's arguments are __grid_constant__: a body that hands a
// reference to them (or a member) to a function it does not inline reads
// them where they are, in the kernel's parameter space, instead of the
// compiler copying the whole struct to local memory first: every split
// attention kernel's stack frame shrank by 170-176 bytes (272 -> 104 with
// RoPE; ptxas -v, sm_90), no other op's changed, and steps got 0.1-1.7%
// faster (results/h200-2026-11-28-grid-constant-args-llama.json).
template <class Launch, class Op, class V>
__global__ void __launch_bounds__(V::kThreads, V::kMinBlocks)
    op_kernel(const __grid_constant__ typename Op::Args args) {
  extern __shared__ __align__(128) unsigned char op_shared[];
  Op::template run<V>(args, block_tile(), op_shared);
}

template <class Launch, class Op, class V, unsigned X, unsigned Y, unsigned Z>
__global__ void __cluster_dims__(X, Y, Z) __launch_bounds__(V::kThreads, V::kMinBlocks)
    op_cluster_kernel(const __grid_constant__ typename Op::Args args) {
  extern __shared__ __align__(128) unsigned char op_shared[];
  Op::template run<V>(args, block_tile(), op_shared);
}

// The compile-time cluster of `n` blocks along V's axis.
template <class V, unsigned N>
struct ClusterDims {
  static constexpr unsigned kX = V::kClusterAxis == 0 ? N : 1;
  static constexpr unsigned kY = V::kClusterAxis == 1 ? N : 1;
  static constexpr unsigned kZ = V::kClusterAxis == 2 ? N : 1;
};
template <class Launch, class Op, class V, unsigned N>
inline constexpr auto kClusterKernel =
    op_cluster_kernel<Launch, Op, V, ClusterDims<V, N>::kX, ClusterDims<V, N>::kY,
                      ClusterDims<V, N>::kZ>;

// The blocks of a clustered launch's cluster (1 when not clustered).
BATON_HOST_DEVICE inline unsigned cluster_blocks(const LaunchShape& shape) {
  return shape.cluster.x * shape.cluster.y * shape.cluster.z;
}

// Raises kernel `K`'s dynamic shared memory limit on the current device to
// `bytes` where a launch needs more than a block may take without asking;
// only ever raised (each kernel remembers its limit per device), so plans of
// different models share a kernel safely. A host-side setting, allowed
// during stream capture.
inline constexpr int kSharedLimitDevices = 64;
template <auto K>
cudaError_t allow_shared_bytes(unsigned bytes) {
  static std::mutex mutex;
  static unsigned allowed[kSharedLimitDevices] = {};  // 0: the default limit
  if (bytes <= kDefaultSharedLimit) return cudaSuccess;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const std::lock_guard<std::mutex> lock(mutex);
  if (device < kSharedLimitDevices && bytes <= allowed[device]) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(K),
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess && device < kSharedLimitDevices) allowed[device] = bytes;
  return e;
}

}  // namespace baton::ops
