// Baton's GEMV (DecoderGemm::kBatonGemv; kernels/gemv_body.cuh) with its
// fusions (kernels/gemv_io.h: what each input and output reads and writes,
// and the optional bias): y[p] = W · x[p], W [out_features, in_features]
// row-major, x [capacity, in_features], y [capacity, out_features], in the
// dtype, fp32 accumulation. Batch invariant: y[p] is bit-identical whatever
// the capacity, *active or p.
//
// Inputs: kPlain (x); kGated, SiLU(gate) * up of a gate | up row [capacity,
// 2 * in_features], rounded, bit-identical to ops::SiluMul then the plain
// GEMV (every row block recomputes it over the whole K, issue-bound for a
// wide FFN: the decoder makes it in the gate | up GEMV's output instead);
// kRmsNorm, the RMSNorm of the fp32 residual stream (each block recomputes
// the scale of its positions, a warp per position, summing the squares in
// another order than ops::RowNorm: the normed input may differ from its
// output in the last bit of the dtype); kEmbeddingRmsNorm, the same of
// embedding rows, which it also stores as the residual stream (bit-identical
// to ops::RowNorm's embedding then the kRmsNorm GEMV).
// Outputs: kStore; kResidualAdd, hidden[p] += y[p] rounded to the dtype
// (bit-identical to the stored GEMV then the residual add); kSiluMul, for a
// gate | up weight (out_features even, no bias), silu(gate) * up of the two
// rounded halves stored as [capacity, out_features / 2], bit-identical to the
// stored (or normed) GEMV then ops::SiluMul. The pairs a step runs: kPlain x
// every output, kGated x {kStore, kResidualAdd}, kRmsNorm x {kStore,
// kSiluMul}, kEmbeddingRmsNorm x kStore.
//
// With DecodeBatch::settled, the residual-add GEMVs also read the residual
// stream before the wait: it must then have been written two or more nodes
// back (never by the kernel just before). Grid (row blocks of 16, position
// blocks of 8, the K split), clusters of (1, 1, split): the split is
// gemv_split's, a function of the shape alone. Refused: in_features % 8 !=
// 0, sizes < 1, W or x not 16-byte aligned, an input or output its fusion
// needs missing (gemv_output_ok), a pair no step runs, a null batch.active.
#pragma once

#include <cstdint>

#include "kernels/gemv_io.h"
#include "kernels/gemv_shape.h"
#include "ops/op.h"
#include "ops/projection.h"
#if defined(__CUDACC__)
#include "kernels/gemv_body.cuh"
#endif

namespace baton::ops {

struct Gemv : KernelOp {
  static constexpr const char* kName = "gemv";
  struct Args : ProjectionArgs<Gemv> {
    GemvInput input = GemvInput::kPlain;
  };

  static Args fused(DecoderDType dtype, GemvInput input, GemvOutput output, const void* w,
                    int out_features, int in_features, const GemvIo& io, DecodeBatch batch) {
    return {{dtype, output, w, out_features, in_features, io, batch}, input};
  }
  static Args plain(DecoderDType dtype, const void* w, int out_features, int in_features,
                    const void* x, DecodeBatch batch, void* y) {
    return fused(dtype, GemvInput::kPlain, GemvOutput::kStore, w, out_features, in_features,
                 GemvIo::plain(x, y), batch);
  }
  static Args gated(DecoderDType dtype, const void* w, int out_features, int in_features,
                    const void* gate_up, DecodeBatch batch, void* y) {
    return fused(dtype, GemvInput::kGated, GemvOutput::kStore, w, out_features, in_features,
                 GemvIo::plain(gate_up, y), batch);
  }
  static Args rms_norm(const DecoderConfig& c, const void* w, int out_features, const float* hidden,
                       const void* norm_weight, DecodeBatch batch, void* y) {
    return fused(c.dtype, GemvInput::kRmsNorm, GemvOutput::kStore, w, out_features, c.d_model,
                 GemvIo::rms_norm(c, hidden, norm_weight, y), batch);
  }
  static Args embedding_rms_norm(const DecoderConfig& c, const void* embedding,
                                 const std::int32_t* tokens, const void* w, int out_features,
                                 const void* norm_weight, DecodeBatch batch, float* hidden,
                                 void* y) {
    return fused(c.dtype, GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore, w, out_features,
                 c.d_model,
                 GemvIo::embedding_rms_norm(c, embedding, tokens, hidden, norm_weight, y), batch);
  }
  static Args residual_add(const DecoderConfig& c, const void* w, int in_features, const void* x,
                           DecodeBatch batch, float* hidden) {
    return fused(c.dtype, GemvInput::kPlain, GemvOutput::kResidualAdd, w, c.d_model, in_features,
                 GemvIo::residual_add(x, hidden), batch);
  }
  static Args gated_residual_add(const DecoderConfig& c, const void* w, int in_features,
                                 const void* gate_up, DecodeBatch batch, float* hidden) {
    return fused(c.dtype, GemvInput::kGated, GemvOutput::kResidualAdd, w, c.d_model, in_features,
                 GemvIo::residual_add(gate_up, hidden), batch);
  }

  // Whether the pair is one the step runs (compiled).
  BATON_HOST_DEVICE static constexpr bool runs(GemvInput in, GemvOutput out) {
    switch (in) {
      case GemvInput::kPlain:
        return true;
      case GemvInput::kGated:
        return out != GemvOutput::kSiluMul;
      case GemvInput::kRmsNorm:
        return out != GemvOutput::kResidualAdd;
      case GemvInput::kEmbeddingRmsNorm:
        return out == GemvOutput::kStore;
    }
    return false;
  }
  static cudaError_t check(const Args& a) {
    const GemvIo& io = a.io;
    bool input_ok = aligned16(io.x);
    if (a.input == GemvInput::kRmsNorm) {
      input_ok = io.hidden != nullptr && aligned16(io.hidden);
    } else if (a.input == GemvInput::kEmbeddingRmsNorm) {
      input_ok = io.embedding != nullptr && aligned16(io.embedding) && io.tokens != nullptr &&
                 io.embedded != nullptr && aligned16(io.embedded) && io.vocab > 0;
    }
    if (detail::decode::normed_input(a.input)) {
      input_ok = input_ok && io.norm_weight != nullptr && aligned16(io.norm_weight);
    }
    const bool ok = runs(a.input, a.output) && projection_ok(a, /*w_present=*/false) && input_ok &&
                    detail::decode::gemv_output_ok(a.output, io, a.out_features);
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }

  // The grid of a launch over `capacity` positions (K split across a
  // cluster: a function of the shape alone).
  BATON_HOST_DEVICE static LaunchShape shape(const Args& a, unsigned shared_bytes) {
    using namespace detail::decode;
    const unsigned split = static_cast<unsigned>(gemv_split(a.out_features, a.in_features));
    return {dim3((a.out_features + kMmaRows - 1) / kMmaRows,
                 (a.batch.capacity + kMmaPositions - 1) / kMmaPositions, split),
            dim3(kMmaWarps * 32), dim3(1, 1, split), shared_bytes};
  }

#if defined(__CUDACC__)
  template <class T, GemvInput In, GemvOutput Out>
  struct Variant  // (the K split: clusters along z)
      : ClusteredBlock<T, detail::decode::kMmaWarps * 32, 2, detail::decode::kMmaMaxSplit> {
    static constexpr GemvInput kInput = In;
    static constexpr GemvOutput kOutput = Out;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    const LaunchShape s = shape(a, sizeof(detail::decode::GemvShared));
    return with_dtype(a.dtype, [&](auto t) {
      using T = decltype(t);
      const bool store = a.output == GemvOutput::kStore, add = a.output == GemvOutput::kResidualAdd;
      switch (a.input) {
        case GemvInput::kPlain:
          return store ? f(Variant<T, GemvInput::kPlain, GemvOutput::kStore>{}, s)
                 : add ? f(Variant<T, GemvInput::kPlain, GemvOutput::kResidualAdd>{}, s)
                       : f(Variant<T, GemvInput::kPlain, GemvOutput::kSiluMul>{}, s);
        case GemvInput::kGated:
          // The device step never runs it (its plan makes SiLU * up in the
          // gate | up GEMV's output): not compiled into its link.
          if constexpr (Launch::kFromDevice) {
            return cudaErrorNotSupported;
          } else {
            return store ? f(Variant<T, GemvInput::kGated, GemvOutput::kStore>{}, s)
                   : add ? f(Variant<T, GemvInput::kGated, GemvOutput::kResidualAdd>{}, s)
                         : cudaErrorInvalidValue;
          }
        case GemvInput::kRmsNorm:
          return store ? f(Variant<T, GemvInput::kRmsNorm, GemvOutput::kStore>{}, s)
                 : add ? cudaErrorInvalidValue
                       : f(Variant<T, GemvInput::kRmsNorm, GemvOutput::kSiluMul>{}, s);
        case GemvInput::kEmbeddingRmsNorm:
          return store ? f(Variant<T, GemvInput::kEmbeddingRmsNorm, GemvOutput::kStore>{}, s)
                       : cudaErrorInvalidValue;
      }
      return cudaErrorInvalidValue;
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    detail::decode::gemv_body<T, V::kInput, V::kOutput>(
        static_cast<const T*>(a.w), a.out_features, a.in_features, a.io, a.batch, tile,
        shared_as<detail::decode::GemvShared>(shared));
  }
#endif
};

}  // namespace baton::ops
