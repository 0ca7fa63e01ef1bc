// The decoder model's plain types, shared by host and device code: the
// shape the decode-step kernels run, how tokens are picked, and the work
// items and completion values of decode requests. No Abseil: .cu files
// include it. baton/decoder_model.h is the model's API.
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

// WorkItem::kind of a decode request; WorkItem::id is its request-table entry
// (DecoderModel::WorkItemFor builds it).
inline constexpr std::uint32_t kDecodeRequestKind = 0x00de0001u;

// Completion::value of an item the model refused (its id is not a valid
// request-table entry); otherwise the value is the number of tokens generated.
inline constexpr std::uint32_t kRefusedRequest = 0xffffffffu;

// How a step picks its tokens: temperature <= 0 is greedy (argmax);
// otherwise seeded sampling from softmax(logits / temperature).
struct SamplingParams {
  float temperature = 1.0f;
  unsigned long long seed = 0;
};

// Limits the kernels are written for (decoder_config_check.cc says why each).
inline constexpr int kDecoderMaxHeadDim = 128;   // one attention block covers a head's row
inline constexpr int kDecoderMaxContext = 8192;  // attention scores of one head in shared memory
inline constexpr int kDecoderRowAlignment = 8;   // 16-byte rows of 2-byte elements (cuBLASLt, GEMV)

}  // namespace baton
