// EnqueueNode (ops/host_driver.h): the one launch every op takes from the
// host.
#include "ops/host_driver.h"
#include "ops/op_kernel.cuh"

namespace baton::ops {
namespace {

// The host driver's launches (its kernels are op_kernel<HostLaunch, ...>).
struct HostLaunch {
  static constexpr bool kFromDevice = false;
};

// A launch with programmatic stream serialization, and the op's cluster
// when it has one: a cluster of one block is what every launch has
// implicitly, and asking for it explicitly costs a cluster launch (H100:
// ~0.3 us per step of the tiny model).
template <class Args>
cudaError_t launch(void (*kernel)(const Args), const LaunchShape& shape, cudaStream_t stream,
                   const Args& args) {
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = shape.cluster.x;
  attributes[1].val.clusterDim.y = shape.cluster.y;
  attributes[1].val.clusterDim.z = shape.cluster.z;
  cudaLaunchConfig_t config{};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = shape.clustered() ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, args);
}

template <class Op>
cudaError_t enqueue(const typename Op::Args& args, cudaStream_t stream) {
  if (const cudaError_t refused = Op::check(args); refused != cudaSuccess) return refused;
  return Op::template select<HostLaunch>(
      args, [&](auto variant, const LaunchShape& shape) -> cudaError_t {
        using V = decltype(variant);
        if (shape.empty()) return cudaSuccess;
        constexpr auto kKernel = op_kernel<HostLaunch, Op, V>;
        const cudaError_t allowed = allow_shared_bytes<kKernel>(shape.shared_bytes);
        if (allowed != cudaSuccess) return allowed;
        return launch(kKernel, shape, stream, args);
      });
}

}  // namespace

cudaError_t EnqueueNode(const OpNode& node, cudaStream_t stream) {
  return visit<cudaError_t>(
      StepOps{}, node.kind,
      [&](auto tag) -> cudaError_t {
        using Op = typename decltype(tag)::type;
        if constexpr (Op::kHostOnly) {
          return cudaErrorNotSupported;
        } else {
          return enqueue<Op>(node.args<Op>(), stream);
        }
      },
      cudaErrorInvalidValue);
}

}  // namespace baton::ops
