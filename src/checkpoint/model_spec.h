// What a Hugging Face config.json says about a Llama-family decoder, reduced to
// the fields Baton's kernels need, with every field the loader cannot honour
// refused up front (before any GPU work), so a checkpoint never runs with a
// silently different model.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace baton::checkpoint {

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM.
enum class Architecture { kLlama, kMistral, kQwen2 };
enum class DType { kFloat32, kFloat16, kBFloat16 };
enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                          // linear, llama3
  double low_freq_factor = 1.0;                 // llama3
  double high_freq_factor = 4.0;                // llama3
  int original_max_position_embeddings = 8192;  // llama3
};

struct ModelSpec {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // "LlamaForCausalLM"
  int num_layers = 0;
  int hidden_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rms_norm_eps = 0.0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // q/k/v projections carry a bias (Qwen2 always; Llama attention_bias)
  bool o_bias = false;    // o_proj carries a bias (Llama attention_bias)
  bool tie_word_embeddings = false;
  // The window every layer uses (Mistral sliding_window; Qwen2 only when
  // use_sliding_window). Per-layer mixes of full and sliding attention are
  // refused, so one value describes the whole model.
  std::optional<int> sliding_window;
  std::optional<DType> dtype;  // torch_dtype, or `dtype` (newer transformers)
  std::optional<int> bos_token_id;
  std::vector<int> eos_token_ids;  // eos_token_id may be an int or a list
};

// The largest num_hidden_layers accepted. Published Llama-family models stop
// well below 200; the cap keeps a corrupt field from making the validator
// enumerate billions of tensor names.
inline constexpr int kMaxLayers = 1024;
// The largest head_dim accepted (the attention kernels' limit).
inline constexpr int kMaxHeadDim = 256;

// Parses config.json text. `source` (a path) prefixes every message, e.g.
// "config.json: rope_scaling.rope_type 'yarn' is not supported (supported:
// linear, llama3)". Every refusal is InvalidArgument; nothing throws.
[[nodiscard]] absl::StatusOr<ModelSpec> ParseModelConfig(std::string_view json_text,
                                                         std::string_view source);

// "LlamaForCausalLM", ...; "bfloat16", "float16", "float32".
[[nodiscard]] std::string_view ArchitectureName(Architecture architecture);
[[nodiscard]] std::string_view DTypeName(DType dtype);
// The safetensors spelling: "BF16", "F16", "F32".
[[nodiscard]] std::string_view SafetensorsDTypeName(DType dtype);
// The dtype a safetensors header spells `name`; nullopt for any other.
[[nodiscard]] std::optional<DType> SafetensorsDType(std::string_view name);
// 4 for F32, 2 for F16 and BF16.
[[nodiscard]] std::size_t DTypeSize(DType dtype);

}  // namespace baton::checkpoint
