// The device's driver over the op table: a plan's nodes launched from the
// GPU (the dynamic-parallelism step), each into cudaStreamTailLaunch so they
// run in order after the launching grid, with grids sized for the step's
// actual rows and sequences. A device launch carries no launch attributes:
// no programmatic dependent launch (every launch is serial: OpFrame::serial
// settles the batches) and no cluster set at launch, so a clustered op
// launches the op_cluster_kernel of its compile-time cluster size; measured
// on an H200 (CUDA 13.0, driver 580), such a kernel launched with <<<>>> into
// cudaStreamTailLaunch runs as clusters (distributed shared memory works),
// so every engine sums in the same order.
//
// Compiled into the device link of the step program that uses it
// (src/model/dp_decoder_step.cu), next to Baton's dynamic-parallelism
// scheduler: device code launches only kernels of its own link. Ops that are
// not kDeviceLaunch (cuBLASLt, the wide GEMV, selection alone) are refused
// with cudaErrorNotSupported and never compiled into the link. Internal;
// Abseil-free.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_kernel.cuh"
#include "ops/step_ops.h"

namespace baton::ops {

// The device driver's launches (its kernels are op_kernel<DeviceLaunch, ...>).
struct DeviceLaunch {
  static constexpr bool kFromDevice = true;
};

// What a walk launched: the first launch CUDA refused, if any, and how many
// kernels it launched.
struct DeviceLaunches {
  cudaError_t error = cudaSuccess;
  std::uint32_t launches = 0;
};

namespace internal {

// Launches V's instantiation whose compile-time cluster is `blocks` blocks.
template <class Op, class V, unsigned N = 1>
__device__ void launch_cluster(unsigned blocks, const LaunchShape& s,
                               const typename Op::Args& args) {
  if (blocks == N) {
    kClusterKernel<DeviceLaunch, Op, V, N>
        <<<s.grid, s.block, s.shared_bytes, cudaStreamTailLaunch>>>(args);
  } else if constexpr (N < static_cast<unsigned>(V::kMaxCluster)) {
    launch_cluster<Op, V, N + 1>(blocks, s, args);
  }
}

// Opts in (host) V's instantiation of `blocks` blocks to `bytes`.
template <class Op, class V, unsigned N = 1>
cudaError_t allow_cluster(unsigned blocks, unsigned bytes) {
  if (blocks == N) return allow_shared_bytes<kClusterKernel<DeviceLaunch, Op, V, N>>(bytes);
  if constexpr (N < static_cast<unsigned>(V::kMaxCluster)) {
    return allow_cluster<Op, V, N + 1>(blocks, bytes);
  }
  return cudaErrorInvalidValue;
}

// `node` bound to `frame`, its variant and shape chosen, and f(Op, V, args,
// shape) called (device or host).
BATON_CALLS_EITHER_SIDE
template <class Table, class F>
BATON_HOST_DEVICE cudaError_t with_device_variant(const OpNode& node, const OpFrame& frame, F&& f) {
  return visit<cudaError_t>(
      Table{}, node.kind,
      [&](auto tag) -> cudaError_t {
        using Op = typename decltype(tag)::type;
        if constexpr (!Op::kDeviceLaunch || Op::kHostOnly) {
          return cudaErrorNotSupported;
        } else {
          typename Op::Args args = node.template args<Op>();
          Op::bind(args, frame, node);
          return Op::template select<DeviceLaunch>(
              args, [&](auto variant, const LaunchShape& shape) -> cudaError_t {
                return f(tag, variant, args, shape);
              });
        }
      },
      cudaErrorInvalidValue);
}

}  // namespace internal

// Launches nodes [0, count) in order, bound to `frame` (serial), from the
// device; a node whose rows or sequences are none this step is skipped (its
// ops have nothing to do, and a grid of 0 blocks is refused). Stops at the
// first launch CUDA refuses.
template <class Table = StepOps>
__device__ DeviceLaunches launch_from_device(const OpNode* nodes, std::uint32_t count,
                                             const OpFrame& frame) {
  DeviceLaunches out;
  for (std::uint32_t i = 0; i < count; ++i) {
    const OpNode& node = nodes[i];
    if ((node.sequences ? frame.sequences : frame.rows) == 0) continue;
    out.error = internal::with_device_variant<Table>(
        node, frame,
        [&](auto tag, auto variant, const auto& args, const LaunchShape& shape) -> cudaError_t {
          using Op = typename decltype(tag)::type;
          using V = decltype(variant);
          if (shape.empty()) return cudaSuccess;
          if constexpr (V::kClusterAxis < 0) {
            op_kernel<DeviceLaunch, Op, V>
                <<<shape.grid, shape.block, shape.shared_bytes, cudaStreamTailLaunch>>>(args);
          } else {
            internal::launch_cluster<Op, V>(cluster_blocks(shape), shape, args);
          }
          const cudaError_t e = cudaGetLastError();
          if (e == cudaSuccess) ++out.launches;
          return e;
        });
    if (out.error != cudaSuccess) break;
  }
  return out;
}

// From the host, before the first device launch: opts every kernel the
// nodes launch in to the dynamic shared memory its largest launch takes
// (`frame`: the most rows and sequences a step holds; a device launch takes
// a kernel's limit as the host set it). Also refuses a node the device
// cannot launch.
template <class Table = StepOps>
cudaError_t prepare_device_launches(const std::vector<OpNode>& nodes, const OpFrame& frame) {
  for (const OpNode& node : nodes) {
    const cudaError_t e = internal::with_device_variant<Table>(
        node, frame, [&](auto tag, auto variant, const auto&, const LaunchShape& shape) {
          using Op = typename decltype(tag)::type;
          using V = decltype(variant);
          if constexpr (V::kClusterAxis < 0) {
            return allow_shared_bytes<op_kernel<DeviceLaunch, Op, V>>(shape.shared_bytes);
          } else {
            return internal::allow_cluster<Op, V>(cluster_blocks(shape), shape.shared_bytes);
          }
        });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace baton::ops
