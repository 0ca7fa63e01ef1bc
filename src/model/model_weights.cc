#include "model_weights.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "checkpoint/convert.h"
#include "kernels/decoder_weights.h"
#include "kernels/rope.h"

namespace baton::detail {
namespace {

// Every tensor in one allocation, 256-byte aligned (cuBLASLt and the GEMV
// read 16-byte vectors).
class Arena {
 public:
  std::size_t Reserve(std::size_t bytes) {
    const std::size_t offset = size_;
    size_ = (size_ + bytes + 255) / 256 * 256;
    return offset;
  }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  std::size_t size_ = 0;
};

// A tensor's place in the arena and how its rows are filled.
struct Placement {
  std::size_t offset = 0;
  std::size_t elements = 0;
  // Host fill: writes `elements` 16-bit values.
  std::function<absl::Status(std::uint16_t*)> fill;
};

class Layout {
 public:
  // Returns the slot whose device pointer `at` gives after Upload.
  std::size_t Add(std::size_t elements, std::function<absl::Status(std::uint16_t*)> fill) {
    const std::size_t offset = arena_.Reserve(elements * sizeof(std::uint16_t));
    placements_.push_back({offset, elements, std::move(fill)});
    return offset;
  }
  // A tensor of `elements` values in a slot of `padded`, the rest zero: the
  // embedding and the LM head, whose vocabulary rows are padded to
  // DecoderConfig::padded_vocab() (zero weights give the padding logits that
  // token selection never reads).
  std::size_t AddPadded(std::size_t elements, std::size_t padded,
                        std::function<absl::Status(std::uint16_t*)> fill) {
    return Add(padded, [elements, padded, fill = std::move(fill)](std::uint16_t* out) {
      BATON_RETURN_IF_ERROR(fill(out));
      std::fill(out + elements, out + padded, std::uint16_t{0});
      return absl::OkStatus();
    });
  }
  [[nodiscard]] std::size_t bytes() const { return arena_.size(); }

  // Allocates the arena and copies every tensor in, one staging buffer at a
  // time (a checkpoint's largest tensor, not the whole model, in host memory).
  absl::Status Upload(DeviceBuffer<unsigned char>& arena, cudaStream_t stream,
                      const ModelWeights::Progress& progress) {
    BATON_ASSIGN_OR_RETURN(arena, DeviceBuffer<unsigned char>::Create(arena_.size()));
    std::vector<std::uint16_t> staging;
    std::uint64_t done = 0, total = 0;
    for (const Placement& p : placements_) total += p.elements * sizeof(std::uint16_t);
    for (const Placement& p : placements_) {
      staging.resize(p.elements);
      BATON_RETURN_IF_ERROR(p.fill(staging.data()));
      BATON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(arena.data() + p.offset, staging.data(),
                                                 p.elements * sizeof(std::uint16_t),
                                                 cudaMemcpyHostToDevice, stream));
      BATON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
      done += p.elements * sizeof(std::uint16_t);
      if (progress) progress(done, total);
    }
    return absl::OkStatus();
  }

 private:
  Arena arena_;
  std::vector<Placement> placements_;
};

std::function<absl::Status(std::uint16_t*)> CopyOf(const std::vector<std::uint16_t>& host) {
  return [&host](std::uint16_t* out) {
    std::memcpy(out, host.data(), host.size() * sizeof(std::uint16_t));
    return absl::OkStatus();
  };
}

checkpoint::DType CheckpointDTypeOf(DecoderDType dtype) {
  return dtype == DecoderDType::kBFloat16 ? checkpoint::DType::kBFloat16
                                          : checkpoint::DType::kFloat16;
}

// Writes `tensor` converted to `dtype` at out; with `rope_heads` > 0 its rows
// are `rope_heads` heads of head_dim rows each, permuted from the rotate-half
// order (pair i = rows i, i + head_dim / 2) to adjacent pairs (rows 2i,
// 2i + 1). `row` elements per row (1 for a bias).
absl::Status ConvertRows(const checkpoint::TensorView& tensor, DecoderDType dtype, int rope_heads,
                         int head_dim, std::size_t row, std::uint16_t* out) {
  if (rope_heads == 0) return checkpoint::ConvertTensor(tensor, CheckpointDTypeOf(dtype), out);
  std::vector<std::uint16_t> converted(static_cast<std::size_t>(rope_heads) * head_dim * row);
  BATON_RETURN_IF_ERROR(
      checkpoint::ConvertTensor(tensor, CheckpointDTypeOf(dtype), converted.data()));
  const int half = head_dim / 2;
  for (int h = 0; h < rope_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      const std::size_t head = static_cast<std::size_t>(h) * head_dim;
      std::memcpy(out + (head + 2 * i) * row, converted.data() + (head + i) * row,
                  row * sizeof(std::uint16_t));
      std::memcpy(out + (head + 2 * i + 1) * row, converted.data() + (head + i + half) * row,
                  row * sizeof(std::uint16_t));
    }
  }
  return absl::OkStatus();
}

// Where each tensor went in the arena (SIZE_MAX: absent), in LayerTensors'
// order per layer.
struct Offsets {
  std::size_t embedding = SIZE_MAX;
  std::size_t final_norm = SIZE_MAX;
  std::size_t lm_head = SIZE_MAX;
  std::vector<std::array<std::size_t, 8>> layers;
};

// Uploads the arena and the RoPE table and points `t` into them.
absl::Status Upload(Layout& layout, const DecoderConfig& config, const Offsets& o,
                    cudaStream_t stream, DeviceBuffer<unsigned char>& arena,
                    DeviceBuffer<float>& rope, ModelTensors& t,
                    const ModelWeights::Progress& progress) {
  BATON_RETURN_IF_ERROR(layout.Upload(arena, stream, progress));
  const std::vector<float> table = RopeInverseFrequencies(config.rope, config.head_dim);
  BATON_ASSIGN_OR_RETURN(rope, DeviceBuffer<float>::Create(table.size()));
  BATON_RETURN_IF_ERROR(rope.CopyFrom(table));
  auto at = [&](std::size_t offset) -> const void* {
    return offset == SIZE_MAX ? nullptr : arena.data() + offset;
  };
  t.embedding = at(o.embedding);
  t.final_norm = at(o.final_norm);
  t.lm_head = at(o.lm_head);
  for (const auto& l : o.layers) {
    t.layers.push_back(LayerTensors{at(l[0]), at(l[1]), at(l[2]), at(l[3]), at(l[4]), at(l[5]),
                                    at(l[6]), at(l[7])});
  }
  t.rope_inv_freq = rope.data();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::Generate(const DecoderConfig& config, std::uint64_t seed,
                                                    cudaStream_t stream, const Progress& progress) {
  BATON_ASSIGN_OR_RETURN(const DecoderHostWeights host, GenerateDecoderWeights(config, seed));
  Layout layout;
  auto place = [&](const std::vector<std::uint16_t>& tensor) -> std::size_t {
    return tensor.empty() ? SIZE_MAX : layout.Add(tensor.size(), CopyOf(tensor));
  };
  const std::size_t vocab_rows = static_cast<std::size_t>(config.padded_vocab()) * config.d_model;
  auto place_vocab = [&](const std::vector<std::uint16_t>& tensor) -> std::size_t {
    return layout.AddPadded(tensor.size(), vocab_rows, CopyOf(tensor));
  };
  Offsets offsets;
  offsets.embedding = place_vocab(host.embedding);
  for (const DecoderLayerWeights& l : host.layers) {
    offsets.layers.push_back({place(l.attn_norm), place(l.wqkv), place(l.qkv_bias), place(l.wo),
                              place(l.o_bias), place(l.ffn_norm), place(l.w_gate_up),
                              place(l.w_down)});
  }
  offsets.final_norm = place(host.final_norm);
  offsets.lm_head = place_vocab(host.lm_head);
  ModelWeights weights;
  BATON_RETURN_IF_ERROR(
      Upload(layout, config, offsets, stream, weights.arena_, weights.rope_, weights.tensors_,
             progress));
  weights.step_bytes_ = host.bytes() - host.embedding.size() * sizeof(std::uint16_t);
  return weights;
}

absl::StatusOr<ModelWeights> ModelWeights::FromCheckpoint(const checkpoint::Checkpoint& ckpt,
                                                          const DecoderConfig& c,
                                                          cudaStream_t stream,
                                                          const Progress& progress) {
  const checkpoint::ModelSpec& spec = ckpt.spec();
  const DecoderDType dtype = c.dtype;
  const std::size_t d = c.d_model;
  Layout layout;
  // One tensor, converted.
  auto tensor = [&](const std::string& name) -> std::size_t {
    const checkpoint::TensorView& view = ckpt.tensor(name);
    return layout.Add(checkpoint::NumElements(view), [&view, dtype](std::uint16_t* out) {
      return checkpoint::ConvertTensor(view, CheckpointDTypeOf(dtype), out);
    });
  };
  // The embedding or the LM head: vocabulary rows padded to padded_vocab().
  auto vocab_tensor = [&](const std::string& name) -> std::size_t {
    const checkpoint::TensorView& view = ckpt.tensor(name);
    return layout.AddPadded(checkpoint::NumElements(view),
                            static_cast<std::size_t>(c.padded_vocab()) * d,
                            [&view, dtype](std::uint16_t* out) {
                              return checkpoint::ConvertTensor(view, CheckpointDTypeOf(dtype), out);
                            });
  };
  // Several tensors' rows one after another; q and k parts permuted for RoPE.
  struct Part {
    std::string name;
    int rope_heads;
  };
  auto fused = [&](std::vector<Part> parts, std::size_t row) -> std::size_t {
    std::size_t elements = 0;
    for (const Part& part : parts) elements += checkpoint::NumElements(ckpt.tensor(part.name));
    return layout.Add(elements, [&ckpt, parts, row, dtype, hd = c.head_dim](std::uint16_t* out) {
      for (const Part& part : parts) {
        const checkpoint::TensorView& view = ckpt.tensor(part.name);
        BATON_RETURN_IF_ERROR(ConvertRows(view, dtype, part.rope_heads, hd, row, out));
        out += checkpoint::NumElements(view);
      }
      return absl::OkStatus();
    });
  };
  Offsets offsets;
  offsets.embedding = vocab_tensor("model.embed_tokens.weight");
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string attn = p + "self_attn.";
    const int kv = c.key_value_heads();
    std::array<std::size_t, 8> o;
    o.fill(SIZE_MAX);
    o[0] = tensor(p + "input_layernorm.weight");
    o[1] = fused({{attn + "q_proj.weight", c.heads},
                  {attn + "k_proj.weight", kv},
                  {attn + "v_proj.weight", 0}},
                 d);
    if (c.qkv_bias) {
      o[2] = fused(
          {{attn + "q_proj.bias", c.heads}, {attn + "k_proj.bias", kv}, {attn + "v_proj.bias", 0}},
          1);
    }
    o[3] = tensor(attn + "o_proj.weight");
    if (c.o_bias) o[4] = tensor(attn + "o_proj.bias");
    o[5] = tensor(p + "post_attention_layernorm.weight");
    o[6] = fused({{p + "mlp.gate_proj.weight", 0}, {p + "mlp.up_proj.weight", 0}}, d);
    o[7] = tensor(p + "mlp.down_proj.weight");
    offsets.layers.push_back(o);
  }
  offsets.final_norm = tensor("model.norm.weight");
  offsets.lm_head = spec.tie_word_embeddings ? offsets.embedding : vocab_tensor("lm_head.weight");
  ModelWeights weights;
  BATON_RETURN_IF_ERROR(
      Upload(layout, c, offsets, stream, weights.arena_, weights.rope_, weights.tensors_, progress));
  const std::size_t embedding_bytes = static_cast<std::size_t>(c.vocab) * d * sizeof(std::uint16_t);
  weights.step_bytes_ =
      ckpt.weight_bytes() / checkpoint::DTypeSize(ckpt.dtype()) * sizeof(std::uint16_t) -
      (spec.tie_word_embeddings ? 0 : embedding_bytes);
  return weights;
}

}  // namespace baton::detail
