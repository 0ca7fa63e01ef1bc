// Row ops over the step's rows (or its sequences' last rows, DecodeBatch::
// rows): the embedding, the residual add and RMSNorm, alone or fused
// (kernels/row_kernel_body.cuh). One block of kRowThreads per row.
//
// - embedding: hidden[p] = embedding[tokens[p]] (fp32); a token outside
//   [0, vocab) gives a zero row instead of reading out of bounds (the host
//   validates prompts).
// - rms_norm: out[p] = hidden[p] / sqrt(mean(hidden[p]^2) + eps) * weight,
//   rounded to the dtype (the input of the next projection).
// - residual_add: hidden[p] += delta[p] (delta [capacity, d_model] in the
//   dtype): the residual connection after the attention output and FFN down
//   projections.
// - embedding_rms_norm, residual_add_rms_norm: the two in one kernel, with
//   the same results (hidden bit-identical, out rounded once from fp32): the
//   step's first layer input, and every residual connection (each is
//   followed by a norm).
// Refused (cudaErrorInvalidValue, before any launch): a config
// ValidateDecoderConfig refuses, a null batch.active or embedding tokens, a
// pointer not 16-byte aligned.
#pragma once

#include <cstdint>

#include "kernels/row_args.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "kernels/row_kernel_body.cuh"
#endif

namespace baton::ops {

struct RowNorm : KernelOp {
  static constexpr const char* kName = "row_norm";
  using Source = detail::decode::RowSource;
  struct Args : RowsArgs<RowNorm> {
    detail::decode::RowArgs io;
    Source source = Source::kHidden;
    bool norm = true;
  };

  static Args embedding(const DecoderConfig& c, const void* embedding, const std::int32_t* tokens,
                        DecodeBatch batch, float* hidden) {
    return {{c, batch}, {embedding, tokens, hidden, nullptr, nullptr}, Source::kEmbedding, false};
  }
  static Args rms_norm(const DecoderConfig& c, const float* hidden, const void* weight,
                       DecodeBatch batch, void* out) {  // hidden is only read
    return {{c, batch},
            {nullptr, nullptr, const_cast<float*>(hidden), weight, out},
            Source::kHidden,
            true};
  }
  static Args residual_add(const DecoderConfig& c, float* hidden, const void* delta,
                           DecodeBatch batch) {
    return {{c, batch}, {delta, nullptr, hidden, nullptr, nullptr}, Source::kResidual, false};
  }
  static Args embedding_rms_norm(const DecoderConfig& c, const void* embedding,
                                 const std::int32_t* tokens, const void* weight, DecodeBatch batch,
                                 float* hidden, void* out) {
    return {{c, batch}, {embedding, tokens, hidden, weight, out}, Source::kEmbedding, true};
  }
  static Args residual_add_rms_norm(const DecoderConfig& c, float* hidden, const void* delta,
                                    const void* weight, DecodeBatch batch, void* out) {
    return {{c, batch}, {delta, nullptr, hidden, weight, out}, Source::kResidual, true};
  }

  static cudaError_t check(const Args& a) {
    const bool tokens = a.source != Source::kEmbedding || a.io.tokens != nullptr;
    return decode_shape_ok(a.config, a.batch) && tokens && aligned16(a.io.source) &&
                   aligned16(a.io.hidden) && aligned16(a.io.weight) && aligned16(a.io.out)
               ? cudaSuccess
               : cudaErrorInvalidValue;
  }

#if defined(__CUDACC__)
  template <class T, Source S, bool Norm>
  struct Variant : Block<T, detail::decode::kRowThreads> {
    static constexpr Source kSource = S;
    static constexpr bool kNorm = Norm;
  };
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    const LaunchShape shape{dim3(a.batch.capacity),
                            dim3(detail::decode::kRowThreads),
                            {1, 1, 1},
                            static_cast<unsigned>(sizeof(detail::decode::RowShared))};
    return with_dtype(a.config.dtype, [&](auto t) {
      using T = decltype(t);
      switch (a.source) {
        case Source::kHidden:  // a norm of the stream alone, nothing else
          return a.norm ? f(Variant<T, Source::kHidden, true>{}, shape) : cudaErrorInvalidValue;
        case Source::kEmbedding:
          return a.norm ? f(Variant<T, Source::kEmbedding, true>{}, shape)
                        : f(Variant<T, Source::kEmbedding, false>{}, shape);
        case Source::kResidual:
          return a.norm ? f(Variant<T, Source::kResidual, true>{}, shape)
                        : f(Variant<T, Source::kResidual, false>{}, shape);
      }
      return cudaErrorInvalidValue;
    });
  }
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    detail::decode::row_body<typename V::Type, V::kSource, V::kNorm>(
        a.config, a.io, a.batch, tile, shared_as<detail::decode::RowShared>(shared));
  }
#endif
};

}  // namespace baton::ops
