// What Baton's GEMV reads besides its weights and where it writes, for each
// of its fusions (kernels/gemv_body.cuh computes them). Plain data: host
// code (the decoder's step plan) builds it, kernels take it by value.
#pragma once

#include <cstdint>

#include "baton/config.h"
#include "baton/decoder_config.h"

namespace baton::detail::decode {

// The input: x itself, SiLU(gate) * up of a gate | up row, the RMSNorm of the
// fp32 residual stream, or the RMSNorm of embedding rows (stored as the
// residual stream on the way).
enum class GemvInput { kPlain, kGated, kRmsNorm, kEmbeddingRmsNorm };
// The output: stored (rounded to the dtype), added to the fp32 residual
// stream after rounding, or, for a gate | up weight [2 * half, in], SiLU(gate)
// * up of the two rounded halves stored as one [capacity, half] row (what
// ops::SiluMul writes from the stored gate | up row).
enum class GemvOutput { kStore, kResidualAdd, kSiluMul };

// What a GEMV reads besides W and where it writes.
struct GemvIo {
  const void* x = nullptr;               // kPlain [capacity, in]; kGated [capacity, 2 * in]
  const float* hidden = nullptr;         // kRmsNorm: residual stream [capacity, in] (fp32)
  const void* embedding = nullptr;       // kEmbeddingRmsNorm: table [vocab, in]
  const std::int32_t* tokens = nullptr;  // kEmbeddingRmsNorm: [capacity]
  float* embedded = nullptr;             // kEmbeddingRmsNorm: hidden = the rows, fp32
  int vocab = 0;                         // kEmbeddingRmsNorm: tokens outside [0, vocab): zero rows
  const void* norm_weight = nullptr;     // k*RmsNorm: [in]
  float rms_epsilon = 0.0f;              // k*RmsNorm
  void* y = nullptr;                     // kStore: [capacity, out]; kSiluMul [capacity, out / 2]
  float* residual = nullptr;             // kResidualAdd: [capacity, out] (fp32), += y
  const void* bias = nullptr;            // optional [out] (dtype): y = W · x + bias, rounded once

  // The four shapes the decoder step uses (the plan and ops::Gemv's
  // factories build them).
  BATON_HOST_DEVICE static GemvIo plain(const void* x, void* y, const void* bias = nullptr) {
    GemvIo io;
    io.x = x;
    io.y = y;
    io.bias = bias;
    return io;
  }
  BATON_HOST_DEVICE static GemvIo residual_add(const void* x, float* hidden,
                                               const void* bias = nullptr) {
    GemvIo io;
    io.x = x;
    io.residual = hidden;
    io.bias = bias;
    return io;
  }
  BATON_HOST_DEVICE static GemvIo rms_norm(const DecoderConfig& config, const float* hidden,
                                           const void* norm_weight, void* y,
                                           const void* bias = nullptr) {
    GemvIo io;
    io.hidden = hidden;
    io.norm_weight = norm_weight;
    io.rms_epsilon = config.rms_epsilon;
    io.y = y;
    io.bias = bias;
    return io;
  }
  BATON_HOST_DEVICE static GemvIo embedding_rms_norm(const DecoderConfig& config,
                                                     const void* embedding,
                                                     const std::int32_t* tokens, float* hidden,
                                                     const void* norm_weight, void* y,
                                                     const void* bias = nullptr) {
    GemvIo io = rms_norm(config, nullptr, norm_weight, y, bias);
    io.embedding = embedding;
    io.tokens = tokens;
    io.embedded = hidden;
    io.vocab = config.vocab;
    return io;
  }
};

// Whether `io` holds what `output` writes, for every GEMV launcher (the GEMV
// and the wide GEMV): y for kStore, the residual stream for kResidualAdd, a
// 2-byte aligned bias if any; kSiluMul: y, an even gate | up width and no
// bias (no FFN has one).
inline bool gemv_output_ok(GemvOutput output, const GemvIo& io, int out_features) {
  if (output == GemvOutput::kSiluMul) {
    return io.y != nullptr && io.bias == nullptr && out_features % 2 == 0;
  }
  return (output == GemvOutput::kStore ? io.y != nullptr : io.residual != nullptr) &&
         reinterpret_cast<std::uintptr_t>(io.bias) % 2 == 0;
}

}  // namespace baton::detail::decode
