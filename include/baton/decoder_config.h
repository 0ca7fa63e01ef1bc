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

// Rotary position embedding: pair i of a head (elements 2i, 2i + 1) turns by
// position * inv_freq[i], inv_freq[i] = theta^(-2i / head_dim), scaled as
// transformers does for "linear" (all frequencies / factor) and "llama3"
// (long wavelengths / factor, short ones kept, a smooth blend between).
// RopeInverseFrequencies (kernels/rope.h) computes the table the kernels read.
enum class RopeScalingType : std::uint32_t { kNone = 0, kLinear = 1, kLlama3 = 2 };
struct RopeConfig {
  float theta = 10000.0f;
  RopeScalingType scaling = RopeScalingType::kNone;
  float factor = 1.0f;                       // linear, llama3
  float low_freq_factor = 1.0f;              // llama3
  float high_freq_factor = 4.0f;             // llama3
  int original_max_position_embeddings = 0;  // llama3
};

// Limits the kernels are written for (decoder_config_check.cc says why each).
inline constexpr int kDecoderMaxHeadDim = 128;   // one attention block covers a head's row
// Contexts: attention is split along the context (any length runs), so
// memory sets the served context; the bound keeps positions, RoPE angles
// (fp32, as transformers computes them) and token tables within what was
// tested, past every Llama-family window (131,072).
inline constexpr int kDecoderMaxContext = 1 << 20;
inline constexpr int kDecoderRowAlignment = 8;   // 16-byte rows of 2-byte elements (cuBLASLt, GEMV)
inline constexpr int kDecoderMaxVocab = 1 << 18;  // every published Llama-family tokenizer fits

struct DecoderConfig {
  int layers = 2;
  int d_model = 256;
  int heads = 4;          // query heads
  int kv_heads = 0;       // key/value heads (0: as many as heads); heads / kv_heads query heads
                          // share one (grouped-query attention; 1 is multi-query attention)
  int head_dim = 64;      // heads * head_dim is the attention width (need not equal d_model)
  int ffn = 512;          // width of the gated FFN's hidden layer
  int vocab = 1024;       // token ids are in [0, vocab); any size up to kDecoderMaxVocab
  int max_context = 256;  // tokens one sequence's KV cache holds
  DecoderDType dtype = DecoderDType::kFloat16;
  float rms_epsilon = 1e-5f;
  RopeConfig rope;
  bool qkv_bias = false;  // the q/k/v projections add a bias (Qwen2)
  bool o_bias = false;    // the attention output projection adds one (Llama's attention_bias)

  // Widths every layer derives from the shape.
  [[nodiscard]] BATON_HOST_DEVICE constexpr int attention_width() const { return heads * head_dim; }
  [[nodiscard]] BATON_HOST_DEVICE constexpr int key_value_heads() const {
    return kv_heads > 0 ? kv_heads : heads;
  }
  [[nodiscard]] BATON_HOST_DEVICE constexpr int kv_width() const {
    return key_value_heads() * head_dim;
  }
  // Query heads per key/value head.
  [[nodiscard]] BATON_HOST_DEVICE constexpr int group_size() const {
    return heads / key_value_heads();
  }
  // The fused QKV projection's output row: q (attention_width) | k | v (kv_width each).
  [[nodiscard]] BATON_HOST_DEVICE constexpr int qkv_width() const {
    return attention_width() + 2 * kv_width();
  }
  // The LM head's rows and the logits' row stride: vocab rounded up to 16-byte
  // rows. The padding rows' weights are zero and token selection never reads
  // their logits, so a vocabulary like 50257 is served as it is.
  [[nodiscard]] BATON_HOST_DEVICE constexpr int padded_vocab() const {
    return (vocab + kDecoderRowAlignment - 1) / kDecoderRowAlignment * kDecoderRowAlignment;
  }
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
// otherwise seeded sampling from softmax(logits / temperature), keyed by
// (seed, sequence id, token index), after top-k (keep the k largest logits,
// ties at the boundary kept) and top-p (keep the smallest set of the largest
// whose probability reaches top_p; equal logits kept or dropped together),
// in transformers' order. Before all of it, on the logits themselves, in
// vLLM's order: the repetition penalty (a token of the prompt or generated
// is divided by repetition_penalty when its logit is positive, multiplied
// when not), then OpenAI's penalties (a token generated n > 0 times loses
// frequency_penalty * n + presence_penalty), and min_tokens (the request's
// stop tokens cannot be chosen until min_tokens were generated).
struct SamplingParams {
  float temperature = 1.0f;
  unsigned long long seed = 0;
  std::uint32_t top_k = 0;          // 0: off
  float top_p = 1.0f;               // >= 1: off
  float presence_penalty = 0.0f;    // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
  std::uint32_t min_tokens = 0;     // <= max_new_tokens; 0: off
};

// The most top alternatives a request's logprobs may ask for (vLLM's and
// OpenAI's top_logprobs limit): DecodeRequest::logprobs,
// DecoderModelOptions::max_logprobs.
inline constexpr std::uint32_t kMaxLogprobs = 20;

// Whether a request's logits need its token counts (DecoderModel keeps them
// per batch slot only for such requests).
BATON_HOST_DEVICE constexpr bool HasPenalties(float presence, float frequency, float repetition) {
  return presence != 0.0f || frequency != 0.0f || repetition != 1.0f;
}

}  // namespace baton
