// Test support: small, valid Hugging Face checkpoints built in memory (config
// JSON plus safetensors bytes from this file's own writer), one per supported
// architecture, optionally sharded and optionally in the transformers-v5
// config style. Tensor names are spelled out here independently of the
// loader's ExpectedTensors, so the tests check one against the other.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "checkpoint/model_spec.h"

namespace baton::checkpoint::testing {

struct TinyOptions {
  Architecture architecture = Architecture::kLlama;
  DType dtype = DType::kBFloat16;
  bool sharded = false;    // two shards plus model.safetensors.index.json
  bool v5_config = false;  // `dtype` and rope_parameters instead of torch_dtype, rope_*
  std::uint64_t seed = 1;  // tensor contents
  int num_layers = 2;
  int hidden_size = 32;
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 8;  // written to the config only when explicit_head_dim
  bool explicit_head_dim = false;
  int intermediate_size = 48;
  int vocab_size = 64;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // Llama only
  // Tensor contents: random bytes (any bit pattern, NaN included: the loader
  // must not care), or values a model can run: linear weights U(-a, a) with
  // a = sqrt(3 / fan_in), norms 1 + U(-0.1, 0.1), biases U(-0.5, 0.5), the
  // embedding U(-sqrt(3), sqrt(3)).
  bool runnable = false;
  int max_position_embeddings = 131072;
};

// The options a published checkpoint of that family looks like, scaled down:
// Llama with llama3 rope scaling, Mistral with a head_dim that is not
// hidden/heads and a sliding window, Qwen2 with tied embeddings and q/k/v bias.
[[nodiscard]] TinyOptions DefaultOptions(Architecture architecture);

struct TinyTensor {
  std::string name;
  DType dtype = DType::kBFloat16;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

struct TinyCheckpoint {
  std::string config_json;
  std::map<std::string, std::string> files;  // what Checkpoint::FromMemory takes
  std::vector<TinyTensor> tensors;           // every tensor written, in file order
};

[[nodiscard]] nlohmann::json TinyConfig(const TinyOptions& options);
// The tensors a model of these options has, filled from `options.seed`.
[[nodiscard]] std::vector<TinyTensor> TinyTensors(const TinyOptions& options);
[[nodiscard]] TinyCheckpoint MakeTinyCheckpoint(const TinyOptions& options);

// The writer: header JSON (with __metadata__, padded to 8 bytes like the
// reference implementation) and the data section, tensors in the given order.
[[nodiscard]] std::string SafetensorsBytes(const std::vector<TinyTensor>& tensors);
// An 8-byte little-endian length, `header`, then `data`: for hand-made files.
[[nodiscard]] std::string RawSafetensors(std::string_view header, std::string_view data);
[[nodiscard]] std::string IndexJson(const std::map<std::string, std::string>& weight_map);

// Writes config.json and the files into `dir` (which must exist).
[[nodiscard]] absl::Status WriteDirectory(const TinyCheckpoint& checkpoint, const std::string& dir);
// A fresh directory under $TMPDIR (or /tmp); empty string on failure.
[[nodiscard]] std::string MakeTempDir();
void RemoveTree(const std::string& dir);

// The process's test seed (support/test_seed.h), printed when first drawn
// so a failure can be replayed.
[[nodiscard]] std::uint64_t TestSeed();

}  // namespace baton::checkpoint::testing
