// SiLU(gate) * up of each row's gate | up projection, the FFN input of the
// cuBLASLt and GEMM plans (the GEMV plans make it in the gate | up GEMV's
// output instead, ops/gemv.h): out[p][i] = silu(gate_up[p][i]) *
// gate_up[p][ffn + i], silu(g) = g / (1 + e^-g). A grid of (ffn / 8 / 128,
// rows) blocks of 128 threads (kernels/row_kernel_body.cuh), no shared
// memory. Refused: a config ValidateDecoderConfig refuses, a null
// batch.active.
#pragma once

#include "kernels/row_args.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/row_kernel_body.cuh"
#endif

namespace baton::ops {

struct SiluMul : KernelOp {
  static constexpr const char* kName = "silu_mul";
  struct Args : RowsArgs<SiluMul> {
    const void* gate_up = nullptr;  // [capacity, 2 * ffn]
    void* out = nullptr;            // [capacity, ffn]
  };

  static Args of(const DecoderConfig& c, const void* gate_up, DecodeBatch batch, void* out) {
    return {{c, batch}, gate_up, out};
  }

  static cudaError_t check(const Args& a) {
    return decode_shape_ok(a.config, a.batch) ? cudaSuccess : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  template <class T>
  struct Variant : Block<T, detail::decode::kRowThreads> {};
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    constexpr unsigned kThreads = detail::decode::kRowThreads;
    const unsigned vectors = static_cast<unsigned>(a.config.ffn / detail::decode::kVector);
    const LaunchShape shape{dim3((vectors + kThreads - 1) / kThreads, a.batch.capacity),
                            dim3(kThreads)};
    return with_dtype(a.config.dtype, [&](auto t) { return f(Variant<decltype(t)>{}, shape); });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void*) {
    using T = typename V::Type;
    detail::decode::silu_mul_body<T>(a.config, static_cast<const T*>(a.gate_up), a.batch,
                                     static_cast<T*>(a.out), tile);
  }
#endif
};

}  // namespace baton::ops
