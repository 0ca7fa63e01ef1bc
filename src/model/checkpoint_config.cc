#include "checkpoint_config.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/decoder_config_check.h"

namespace baton::detail {
namespace {

absl::Status Unsupported(const std::string& source, const char* field, double value,
                         const std::string& supported) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", field, " ", value,
                                                 " is not supported (supported: ", supported, ")"));
}

}  // namespace

absl::StatusOr<DecoderConfig> DecoderConfigFromCheckpoint(const checkpoint::ModelSpec& spec,
                                                          checkpoint::DType checkpoint_dtype,
                                                          const std::string& source,
                                                          int max_context,
                                                          std::optional<DecoderDType> dtype) {
  if (spec.head_dim % 2 != 0 || spec.head_dim > kDecoderMaxHeadDim) {
    return Unsupported(source, "head_dim", spec.head_dim,
                       absl::StrCat("even values up to ", kDecoderMaxHeadDim,
                                    ", e.g. 64 and 128: one attention block holds a head's row"));
  }
  struct Row {
    const char* field;
    int value;
  };
  for (const Row& row :
       {Row{"hidden_size", spec.hidden_size}, Row{"intermediate_size", spec.intermediate_size},
        Row{"num_attention_heads * head_dim", spec.num_heads * spec.head_dim},
        Row{"num_key_value_heads * head_dim", spec.num_kv_heads * spec.head_dim}}) {
    if (row.value % kDecoderRowAlignment != 0) {
      return Unsupported(source, row.field, row.value,
                         absl::StrCat("multiples of ", kDecoderRowAlignment,
                                      ": Baton's GEMV and cuBLASLt plans read 16-byte rows"));
    }
  }
  if (spec.vocab_size > kDecoderMaxVocab) {
    return Unsupported(source, "vocab_size", spec.vocab_size,
                       absl::StrCat("up to ", kDecoderMaxVocab));
  }
  // The default: the longest context the model, the attention kernels and a
  // sliding window (Baton attends over every token) all allow.
  int context_limit = std::min(spec.max_position_embeddings, kDecoderMaxContext);
  if (spec.sliding_window.has_value())
    context_limit = std::min(context_limit, *spec.sliding_window);
  const int served = max_context == 0 ? context_limit : max_context;
  if (served < 1 || served > kDecoderMaxContext) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DecoderModelOptions::max_context ", served, " is outside [1, ", kDecoderMaxContext,
        "] (the longest context Baton's kernels were tested at): lower it"));
  }
  if (served > spec.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecoderModelOptions::max_context ", served, " exceeds ", source,
                     ": max_position_embeddings ", spec.max_position_embeddings,
                     ", the longest context the model was built for: lower it"));
  }
  if (spec.sliding_window.has_value() && *spec.sliding_window < served) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": sliding_window ", *spec.sliding_window, " is below the served context ", served,
        " (supported: no sliding window, or one at least the served context: Baton attends over "
        "every token); lower DecoderModelOptions::max_context to ",
        *spec.sliding_window));
  }
  DecoderConfig c;
  c.layers = spec.num_layers;
  c.d_model = spec.hidden_size;
  c.heads = spec.num_heads;
  c.kv_heads = spec.num_kv_heads;
  c.head_dim = spec.head_dim;
  c.ffn = spec.intermediate_size;
  c.vocab = spec.vocab_size;
  c.max_context = served;
  c.rms_epsilon = static_cast<float>(spec.rms_norm_eps);
  c.qkv_bias = spec.qkv_bias;
  c.o_bias = spec.o_bias;
  c.rope.theta = static_cast<float>(spec.rope_theta);
  switch (spec.rope_scaling.type) {
    case checkpoint::RopeScalingType::kNone:
      c.rope.scaling = RopeScalingType::kNone;
      break;
    case checkpoint::RopeScalingType::kLinear:
      c.rope.scaling = RopeScalingType::kLinear;
      break;
    case checkpoint::RopeScalingType::kLlama3:
      c.rope.scaling = RopeScalingType::kLlama3;
      break;
  }
  c.rope.factor = static_cast<float>(spec.rope_scaling.factor);
  c.rope.low_freq_factor = static_cast<float>(spec.rope_scaling.low_freq_factor);
  c.rope.high_freq_factor = static_cast<float>(spec.rope_scaling.high_freq_factor);
  c.rope.original_max_position_embeddings = spec.rope_scaling.original_max_position_embeddings;
  if (dtype.has_value()) {
    c.dtype = *dtype;
  } else {
    c.dtype = checkpoint_dtype == checkpoint::DType::kFloat16 ? DecoderDType::kFloat16
                                                              : DecoderDType::kBFloat16;
  }
  const absl::Status valid = ValidateDecoderConfig(c);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", valid.message()));
  }
  return c;
}

}  // namespace baton::detail
