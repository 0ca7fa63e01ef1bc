// The shape of the small decoder-only transformer the decode-step kernels
// run (issue 6). Plain data, no Abseil: .cu files include it. The host-side
// check lives in baton/decoder_config_check.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "baton/config.h"

namespace baton {

// Storage type of weights, activations fed to GEMMs and the KV cache. Every
// kernel accumulates in fp32.
enum class DecoderDType : std::uint32_t { kFloat16 = 0, kBFloat16 = 1 };

struct DecoderConfig {
  int layers = 2;
  int d_model = 256;
  int heads = 4;
  int head_dim = 64;  // heads * head_dim is the attention width (need not equal d_model)
  int ffn = 512;      // width of the gated FFN's hidden layer
  int vocab = 1024;
  int max_context = 256;  // tokens one sequence's KV cache holds
  DecoderDType dtype = DecoderDType::kFloat16;
  float rms_epsilon = 1e-5f;
  float rope_theta = 10000.0f;

  // Widths every layer derives from the shape.
  [[nodiscard]] BATON_HOST_DEVICE constexpr int attention_width() const { return heads * head_dim; }
  // The fused QKV projection's output row: q | k | v, each attention_width().
  [[nodiscard]] BATON_HOST_DEVICE constexpr int qkv_width() const { return 3 * attention_width(); }
  // The fused gate/up projection's output row: gate | up, each ffn.
  [[nodiscard]] BATON_HOST_DEVICE constexpr int gate_up_width() const { return 2 * ffn; }
};

// Limits the kernels are written for (decoder_config_check.cc says why each).
inline constexpr int kDecoderMaxHeadDim = 128;   // one attention block covers a head's row
inline constexpr int kDecoderMaxContext = 8192;  // attention scores of one head in shared memory
inline constexpr int kDecoderRowAlignment = 8;   // 16-byte rows of 2-byte elements (cuBLASLt, GEMV)

}  // namespace baton
