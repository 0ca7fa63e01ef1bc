// The op table's contract: what every op of a decoder step is, and the plan
// node that names one. Plain C++ (host and device, no Abseil), so host code
// builds plans and device code walks them.
//
// An op is a descriptor (one header each in src/ops/, listed once in
// step_ops.h), in the spirit of the task bodies that Mirage's persistent
// kernel and the Megakernels interpreter share between launch paths:
//
//   struct Op : KernelOp {  // (or GraphOnlyOp, HostOp: what the drivers may do with it)
//     static constexpr const char* kName;             // for errors and traces
//     struct Args;        // everything one launch reads, by value (trivially copyable)
//     static cudaError_t check(const Args&);         // host: the refusal contract
//     static void bind(Args&, const OpFrame&, const OpNode&);  // a plan's node -> a launch
//     template <class Launch, class F>
//     static cudaError_t select(const Args&, F&& f);  // f(variant, LaunchShape)
//     template <class V>
//     static __device__ void run(const Args&, Tile, void* shared);  // the body
//   };
//
// `select` picks the op's compiled variant (storage type, fusions, tile)
// from the arguments and computes its launch shape; `run` is the body of a
// block, with its tile and shared memory from its caller (no blockIdx, no
// static __shared__, no __global__). The drivers are generic over the table:
// ops/host_driver.h (graph capture and single launches from the host) and
// ops/device_driver.cuh (the dynamic-parallelism step). Adding an op is one
// descriptor and one line in step_ops.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "baton/config.h"
#include "baton/decoder_config.h"
#include "baton/step_args.h"
#include "kernels/decode_batch.h"
#include "kernels/tile.h"

namespace baton {
class CublasLtLinear;
}

// Before a host-device template that calls what it is given (a host lambda
// from the host driver, a device lambda from the device driver): nvcc's
// check that a __host__ __device__ function calls only such functions is
// off for it, the instantiation each driver makes calling its own side's.
#if defined(__CUDACC__)
#define BATON_CALLS_EITHER_SIDE _Pragma("nv_exec_check_disable")
#else
#define BATON_CALLS_EITHER_SIDE
#endif

namespace baton::ops {

using detail::Tile;

// How a driver launches one op: the grid (an empty one launches nothing),
// the block, the thread-block cluster (1 x 1 x 1: none) and the dynamic
// shared memory the body gets.
struct LaunchShape {
  dim3 grid;
  dim3 block;
  dim3 cluster{1, 1, 1};
  unsigned shared_bytes = 0;

  [[nodiscard]] BATON_HOST_DEVICE bool empty() const {
    return grid.x == 0 || grid.y == 0 || grid.z == 0;
  }
  [[nodiscard]] BATON_HOST_DEVICE bool clustered() const {
    return cluster.x * cluster.y * cluster.z > 1;
  }
};

// Compiled variants are tag types: an op's select() calls f(V{}, shape).
// Shared memory past what a block may take without asking (48 KB) must be
// opted in to, per kernel, from the host.
inline constexpr unsigned kDefaultSharedLimit = 48u * 1024u;

// The rows and sequences a launch covers and what it is launched from: what
// binds a plan's node to one launch (each op's bind()).
struct OpFrame {
  StepArgs args;                // the scheduler's, for this runtime
  std::uint32_t rows = 0;       // the layer ops': the bucket, or the step's rows (device)
  std::uint32_t sequences = 0;  // the sequence ops': min(rows, max_batch), or the live batch
  // Launched one after another (device launches into the tail-launch stream):
  // every node's data is final when it starts, and no launch may overlap the
  // next (DecodeBatch::settled, launch_next_early).
  bool serial = false;
  // The graph path's cuBLASLt plans of this bucket, by projection (host
  // only; ops/linear.h).
  CublasLtLinear* const* linears = nullptr;
};

// Bytes of the largest Args of any op (static_asserted by OpNode::set).
inline constexpr std::size_t kOpArgsBytes = 512;

// One op of a plan: which op (its place in the table), whether it runs over
// the step's sequences rather than its rows, and its arguments as the plan
// made them. Plain bytes, copied to device memory as they are.
struct alignas(16) OpNode {
  std::uint32_t kind = 0;
  bool sequences = false;  // covers the step's sequences (each reading its last row)
  alignas(16) unsigned char bytes[kOpArgsBytes] = {};

  template <class Op>
  BATON_HOST_DEVICE const typename Op::Args& args() const {
    return *reinterpret_cast<const typename Op::Args*>(bytes);
  }
  template <class Op>
  void set(const typename Op::Args& a) {
    static_assert(sizeof(typename Op::Args) <= kOpArgsBytes, "raise kOpArgsBytes");
    static_assert(alignof(typename Op::Args) <= 16, "an op's Args is at most 16-byte aligned");
    static_assert(std::is_trivially_copyable_v<typename Op::Args>, "Args are copied as bytes");
    std::memcpy(bytes, &a, sizeof(a));
  }
};

// A node's DecodeBatch bound to one launch: the plan set its per-row
// pointers (slots, positions, fresh or rows) and how it meets its
// neighbours; the launch sets its live count and capacity, the step's rows
// or its sequences, and a serial launch settles it.
BATON_HOST_DEVICE inline void bind_batch(DecodeBatch& batch, const OpFrame& frame,
                                         const OpNode& node) {
  StepHeader* const header = frame.args.header;  // (null where a host only sizes launches)
  batch.active = header == nullptr ? nullptr : node.sequences ? &header->batch : &header->tokens;
  batch.capacity = node.sequences ? frame.sequences : frame.rows;
  if (frame.serial) {
    batch.settled = true;
    batch.launch_next_early = false;
  }
}

// What an op over the model's rows reads first: the model's shape and the
// batch of rows (or sequences) a launch covers. `Op` names the descriptor:
// an op's arguments say which op they are for (ops::Enqueue needs no more).
template <class O>
struct RowsArgs {
  using Op = O;
  DecoderConfig config;
  DecodeBatch batch;
};

// What an op is to the drivers, as a base of its descriptor: a kernel every
// launch path runs (KernelOp), a kernel the graph path alone runs
// (GraphOnlyOp: the device step never compiles it), or a host call
// (HostOp: cuBLASLt). A kernel op over the step's rows or sequences binds
// its `batch` (bind_batch); the ops bound otherwise say so.
struct KernelOp {
  static constexpr bool kDeviceLaunch = true;
  static constexpr bool kHostOnly = false;
  template <class Args>
  BATON_HOST_DEVICE static void bind(Args& a, const OpFrame& frame, const OpNode& node) {
    bind_batch(a.batch, frame, node);
  }
};
struct GraphOnlyOp : KernelOp {
  static constexpr bool kDeviceLaunch = false;
};
struct HostOp {
  static constexpr bool kDeviceLaunch = false;
  static constexpr bool kHostOnly = true;
};

// The table: a list of descriptors, an op's kind being its place in it.
template <class... Ops>
struct OpList {
  static constexpr std::uint32_t kSize = sizeof...(Ops);
};

// An op as a value, for the visitors' generic lambdas.
template <class Op>
struct OpTag {
  using type = Op;
};

namespace internal {
template <class Op, class... Ops>
struct IndexOf;
template <class Op, class... Rest>
struct IndexOf<Op, Op, Rest...> {
  static constexpr std::uint32_t value = 0;
};
template <class Op, class First, class... Rest>
struct IndexOf<Op, First, Rest...> {
  static constexpr std::uint32_t value = 1 + IndexOf<Op, Rest...>::value;
};
}  // namespace internal

template <class Op, class Table>
struct KindOf;
template <class Op, class... Ops>
struct KindOf<Op, OpList<Ops...>> {
  static constexpr std::uint32_t value = internal::IndexOf<Op, Ops...>::value;
};

// Calls f(OpTag<Op>{}) for the op of `kind` in the table and returns what it
// returns; `otherwise` for a kind past the table.
BATON_CALLS_EITHER_SIDE
template <class R, class F>
BATON_HOST_DEVICE R visit(OpList<>, std::uint32_t, F&&, R otherwise) {
  return otherwise;
}
BATON_CALLS_EITHER_SIDE
template <class R, class Op, class... Rest, class F>
BATON_HOST_DEVICE R visit(OpList<Op, Rest...>, std::uint32_t kind, F&& f, R otherwise) {
  if (kind == 0) return f(OpTag<Op>{});
  return visit<R>(OpList<Rest...>{}, kind - 1, static_cast<F&&>(f), otherwise);
}

// Calls f(OpTag<Op>{}) for every op of the table, in order.
BATON_CALLS_EITHER_SIDE
template <class... Ops, class F>
BATON_HOST_DEVICE void for_each_op(OpList<Ops...>, F&& f) {
  (f(OpTag<Ops>{}), ...);
}

// The shared memory a body's typed storage starts at: its caller's dynamic
// shared memory (128-byte aligned), and what follows a struct in it.
template <class S>
__device__ __forceinline__ S& shared_as(void* shared) {
  return *static_cast<S*>(shared);
}
BATON_HOST_DEVICE constexpr unsigned align_shared(std::size_t bytes) {
  return static_cast<unsigned>((bytes + 127) / 128 * 128);
}

// Calls f(T{}) with the storage type of `dtype` and returns what it returns
// (cudaErrorInvalidValue for a dtype Baton does not store).
BATON_CALLS_EITHER_SIDE
template <class F>
BATON_HOST_DEVICE cudaError_t with_dtype(DecoderDType dtype, F&& f) {
  switch (dtype) {
    case DecoderDType::kFloat16:
      return f(__half{});
    case DecoderDType::kBFloat16:
      return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

// A compiled variant: its storage type and its block, kThreads threads, at
// least kMinBlocks resident per SM (the generic kernels' __launch_bounds__;
// 0 asks for nothing, which is not the same as 1: a minimum of one block let
// ptxas give the RoPE append 48 registers instead of 32). A variant launched
// in thread-block clusters says along which axis (0 x, 2 z) and how large
// they may be: a device launch takes its cluster from the kernel's
// compile-time __cluster_dims__, one instantiation per size.
template <class T, int Threads, int MinBlocks = 0>
struct Block {
  using Type = T;  // the storage type (fp16 or bf16; void where none)
  static constexpr int kThreads = Threads;
  static constexpr int kMinBlocks = MinBlocks;
  static constexpr int kClusterAxis = -1;  // not clustered
  static constexpr int kMaxCluster = 1;
};
template <class T, int Threads, int Axis, int MaxCluster, int MinBlocks = 0>
struct ClusteredBlock : Block<T, Threads, MinBlocks> {
  static constexpr int kClusterAxis = Axis;
  static constexpr int kMaxCluster = MaxCluster;
};

// What checks share: a 16-byte aligned (possibly null) device pointer, and
// the shapes ValidateDecoderConfig accepts (16-byte rows included) with a
// batch whose live count can be read.
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
inline bool decode_shape_ok(const DecoderConfig& c, const DecodeBatch& batch) {
  constexpr int kVector = detail::decode::kVector;
  return c.d_model > 0 && c.heads > 0 && c.kv_heads >= 0 && c.heads % c.key_value_heads() == 0 &&
         c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= kDecoderMaxHeadDim && c.ffn > 0 &&
         c.vocab > 0 && c.max_context > 0 && c.max_context <= kDecoderMaxContext &&
         c.d_model % kVector == 0 && c.ffn % kVector == 0 && c.padded_vocab() % kVector == 0 &&
         c.attention_width() % kVector == 0 && batch.active != nullptr;
}

}  // namespace baton::ops
