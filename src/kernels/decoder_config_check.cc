#include "kernels/decoder_config_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

// Integers print whole (StrCat's double would print 1048577 as 1.04858e+06).
absl::Status Invalid(const char* field, double value, const std::string& fix) {
  const bool whole = std::isfinite(value) && std::fabs(value) < 1e15 &&
                     value == static_cast<double>(static_cast<long long>(value));
  return absl::InvalidArgumentError(absl::StrCat(
      "decoder config: ", field, " = ",
      whole ? absl::StrCat(static_cast<long long>(value)) : absl::StrCat(value), " ", fix));
}

}  // namespace

absl::Status ValidateDecoderConfig(const DecoderConfig& config) {
  struct Positive {
    const char* name;
    int value;
  };
  for (const Positive& field :
       {Positive{"layers", config.layers}, Positive{"d_model", config.d_model},
        Positive{"heads", config.heads}, Positive{"head_dim", config.head_dim},
        Positive{"ffn", config.ffn}, Positive{"vocab", config.vocab},
        Positive{"max_context", config.max_context}}) {
    if (field.value < 1) return Invalid(field.name, field.value, "must be >= 1");
  }
  if (config.kv_heads < 0 || config.heads % config.key_value_heads() != 0) {
    return Invalid("kv_heads", config.kv_heads,
                   absl::StrCat("must divide heads (", config.heads,
                                "): each key/value head serves a whole group of query heads"));
  }
  if (config.dtype != DecoderDType::kFloat16 && config.dtype != DecoderDType::kBFloat16) {
    return Invalid("dtype", static_cast<double>(config.dtype),
                   "is not a DecoderDType; use kFloat16 or kBFloat16");
  }
  // RoPE rotates pairs of a head's elements.
  if (config.head_dim % 2 != 0 || config.head_dim > kDecoderMaxHeadDim) {
    return Invalid("head_dim", config.head_dim,
                   absl::StrCat("must be even and <= ", kDecoderMaxHeadDim,
                                " (RoPE rotates pairs; one attention block holds a head's row)"));
  }
  // GEMM rows (cuBLASLt plans and the runtime's GEMV) load 16 bytes at a time.
  // (The vocabulary is padded to padded_vocab() instead: its rows are the LM
  // head's outputs, and selection reads only the first `vocab`.)
  for (const Positive& field : {Positive{"d_model", config.d_model}, Positive{"ffn", config.ffn},
                                Positive{"heads * head_dim", config.attention_width()},
                                Positive{"kv_heads * head_dim", config.kv_width()}}) {
    if (field.value % kDecoderRowAlignment != 0) {
      return Invalid(field.name, field.value,
                     absl::StrCat("must be a multiple of ", kDecoderRowAlignment,
                                  " so every GEMM row is 16-byte aligned; pad it"));
    }
  }
  // Token selection and the logits buffer are sized per vocabulary entry; the
  // limit keeps a mistyped vocabulary from sizing them past what was tested.
  if (config.vocab > kDecoderMaxVocab) {
    return Invalid("vocab", config.vocab,
                   absl::StrCat("exceeds ", kDecoderMaxVocab,
                                " (256k covers every Llama-family tokenizer); lower it"));
  }
  if (config.max_context > kDecoderMaxContext) {
    return Invalid("max_context", config.max_context,
                   absl::StrCat("exceeds ", kDecoderMaxContext,
                                " (the longest context the kernels were tested at); lower it"));
  }
  if (!(config.rms_epsilon > 0.0f) || !std::isfinite(config.rms_epsilon)) {
    return Invalid("rms_epsilon", config.rms_epsilon, "must be a finite value > 0");
  }
  const RopeConfig& rope = config.rope;
  if (!(rope.theta > 1.0f) || !std::isfinite(rope.theta)) {
    return Invalid("rope.theta", rope.theta, "must be a finite value > 1 (e.g. 10000)");
  }
  if (rope.scaling != RopeScalingType::kNone && rope.scaling != RopeScalingType::kLinear &&
      rope.scaling != RopeScalingType::kLlama3) {
    return Invalid("rope.scaling", static_cast<double>(rope.scaling),
                   "is not a RopeScalingType; use kNone, kLinear or kLlama3");
  }
  if (rope.scaling != RopeScalingType::kNone &&
      (!(rope.factor > 0.0f) || !std::isfinite(rope.factor))) {
    return Invalid("rope.factor", rope.factor, "must be a finite value > 0");
  }
  if (rope.scaling == RopeScalingType::kLlama3 &&
      (!(rope.low_freq_factor > 0.0f) || !(rope.high_freq_factor > rope.low_freq_factor) ||
       !std::isfinite(rope.high_freq_factor) || rope.original_max_position_embeddings < 1)) {
    return Invalid("rope.high_freq_factor", rope.high_freq_factor,
                   "with llama3 scaling needs 0 < low_freq_factor < high_freq_factor and "
                   "original_max_position_embeddings >= 1");
  }
  return absl::OkStatus();
}

}  // namespace baton
