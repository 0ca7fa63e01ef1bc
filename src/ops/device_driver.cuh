// The device's driver over the op table: a plan's nodes launched from the
// GPU (the dynamic-parallelism step), each into cudaStreamTailLaunch so they
// run in order after the launching grid, with grids sized for the step's
// actual rows and sequences. A device launch carries no launch attributes:
// no programmatic dependent launch (every launch is serial: OpFrame::serial
// settles the batches) and no cluster set at launch, so a clustered op
// launches the op_cluster_kernel of its compile-time cluster size; measured
// on an H200 (CUDA 13.0, driver 580), such a kernel launched from the device
// into cudaStreamTailLaunch runs as clusters (distributed shared memory
// works; measured with <<<>>>, which nvcc lowers to the same
// cudaGetParameterBufferV2 / cudaLaunchDeviceV2 pair launch_node calls, and
// the DP tests pass on that form), so every engine sums in the same order.
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

// V's instantiation whose compile-time cluster is `blocks` blocks (its
// device-side address; null for a size V does not compile).
template <class Op, class V, unsigned N = 1>
__device__ void* cluster_kernel(unsigned blocks) {
  if (blocks == N) {
    return reinterpret_cast<void*>(kClusterKernel<DeviceLaunch, Op, V, N>);
  } else if constexpr (N < static_cast<unsigned>(V::kMaxCluster)) {
    return cluster_kernel<Op, V, N + 1>(blocks);
  }
  return nullptr;
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
// shape) called (the host's preparation).
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

// One node of op `Op` bound and launched from the device; cudaSuccess with
// nothing launched for an empty grid. Out of line, one function per op: each
// op's arguments and variant choice get their own registers and stack, so
// the walk that calls them (one warp between every two steps) spills none
// (inlined, the table's twelve ops took the scheduler to 240 registers and a
// kilobyte of spills). The variant choice only picks a kernel; the one
// launch site below (the device runtime's parameter buffer, the arguments
// copied in, the launch) serves every variant: a <<<>>> per variant compiled
// a copy of the launch sequence for each (some hundred for the GEMV), and the
// walk is one thread whose every instruction fetch after a step's kernels is
// a miss, so its time per launch grows with the code it runs through.
template <class Op>
__device__ __noinline__ cudaError_t launch_node(const OpNode& node, const OpFrame& frame,
                                                bool& launched) {
  using Args = typename Op::Args;
  Args args = node.template args<Op>();
  Op::bind(args, frame, node);
  void* kernel = nullptr;
  LaunchShape shape;
  const cudaError_t chosen = Op::template select<DeviceLaunch>(
      args, [&](auto variant, const LaunchShape& s) -> cudaError_t {
        using V = decltype(variant);
        shape = s;
        if (s.empty()) return cudaSuccess;
        if constexpr (V::kClusterAxis < 0) {
          kernel = reinterpret_cast<void*>(op_kernel<DeviceLaunch, Op, V>);
        } else {
          kernel = cluster_kernel<Op, V>(cluster_blocks(s));
        }
        return kernel == nullptr ? cudaErrorInvalidConfiguration : cudaSuccess;
      });
  if (chosen != cudaSuccess || shape.empty()) return chosen;
  void* buffer = cudaGetParameterBufferV2(kernel, shape.grid, shape.block, shape.shared_bytes);
  if (buffer == nullptr) {  // (the pending-launch pool is full)
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchPendingCountExceeded;
  }
  *static_cast<Args*>(buffer) = args;  // the kernel's one parameter, at its own alignment
  const cudaError_t e = cudaLaunchDeviceV2(buffer, cudaStreamTailLaunch);
  launched = e == cudaSuccess;
  return e;
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
    bool launched = false;
    out.error = visit<cudaError_t>(
        Table{}, node.kind,
        [&](auto tag) -> cudaError_t {
          using Op = typename decltype(tag)::type;
          if constexpr (!Op::kDeviceLaunch || Op::kHostOnly) {
            return cudaErrorNotSupported;
          } else {
            return internal::launch_node<Op>(node, frame, launched);
          }
        },
        cudaErrorInvalidValue);
    if (launched) ++out.launches;
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
