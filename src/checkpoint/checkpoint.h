// A Hugging Face model directory (config.json plus model.safetensors, or
// model.safetensors.index.json plus its shards), opened, mapped and checked
// against the config before any GPU work: every tensor the architecture needs
// is present with the shape the config implies, nothing else is, and the
// dtypes agree. The views handed out point into the mapped files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/model_spec.h"
#include "checkpoint/safetensors.h"

namespace baton::checkpoint {

struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  // The config fields the shape follows from, for messages:
  // "[num_key_value_heads * head_dim, hidden_size]".
  std::string derivation;
};

// Every tensor a model of this spec has, in the Hugging Face layout and
// order: embeddings, each layer's norms and projections, the final norm and
// lm_head (absent when tie_word_embeddings).
[[nodiscard]] std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& spec);

class Checkpoint {
 public:
  // Opens a model directory. NotFound when the directory, config.json or a
  // shard is missing (or neither model.safetensors nor the index exists);
  // InvalidArgument, naming the file, the tensor or field and what was
  // expected, for everything else.
  [[nodiscard]] static absl::StatusOr<Checkpoint> Open(const std::string& dir);
  // The same over files held in memory: `files` maps a file name to its bytes
  // ("model.safetensors", or "model.safetensors.index.json" plus its shards).
  // `dir_name` stands in for the directory in messages.
  [[nodiscard]] static absl::StatusOr<Checkpoint> FromMemory(
      std::string config_json, std::map<std::string, std::string> files,
      std::string dir_name = "<memory>");

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  ~Checkpoint();

  const ModelSpec& spec() const { return spec_; }
  // A tensor ExpectedTensors(spec()) lists, validated. Asking for any other
  // name is a programming error: it prints the name and aborts.
  const TensorView& tensor(std::string_view name) const;
  // The same, or nullptr for a name ExpectedTensors does not list.
  const TensorView* find(std::string_view name) const;
  // Bytes of all expected tensors (what the GPU copy will need before any
  // conversion).
  std::size_t weight_bytes() const { return weight_bytes_; }
  // The dtype every weight has: the config's when it declares one.
  DType dtype() const { return dtype_; }

 private:
  Checkpoint() = default;
  friend class CheckpointLoader;

  ModelSpec spec_;
  std::vector<SafetensorsFile> files_;  // owns the mappings the views point into
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::size_t weight_bytes_ = 0;
  DType dtype_ = DType::kBFloat16;
};

}  // namespace baton::checkpoint
