#include "model_weights.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/status.h"
#include "checkpoint/convert.h"
#include "kernels/decoder_config_check.h"
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


// The parts of a whole row-major [rows, cols] tensor that a rank holds, in
// the order it stores them (plan/tensor_parallel.h's slices; one slice of
// everything without tensor parallelism).
struct Picks {
  std::size_t cols = 0;  // the whole tensor's
  std::vector<Slice> slices;
  [[nodiscard]] std::size_t elements() const {
    std::size_t n = 0;
    for (const Slice& s : slices) n += s.elements();
    return n;
  }
};
// A slice `rows` further down a fused tensor (k after q, up after gate).
Slice Shifted(Slice s, std::size_t rows) {
  s.row_begin += rows;
  s.row_end += rows;
  return s;
}
Picks Whole(std::size_t rows, std::size_t cols) { return Picks{cols, {Slice{0, rows, 0, cols}}}; }

// Draws the picked elements of a synthetic tensor of the whole model into
// `out` (picks.elements() values), rows spread over the host's cores: a
// 70B-shaped rank draws billions of elements.
void DrawSynthetic(const DecoderConfig& whole, std::uint64_t seed, const SyntheticTensor& tensor,
                   const Picks& picks, std::uint16_t* out) {
  struct Run {
    std::size_t from, count, to;  // whole-tensor index, elements, output index
  };
  std::vector<Run> runs;
  std::size_t to = 0;
  for (const Slice& s : picks.slices) {
    const std::size_t width = s.col_end - s.col_begin;
    for (std::size_t r = s.row_begin; r < s.row_end; ++r, to += width) {
      runs.push_back({r * picks.cols + s.col_begin, width, to});
    }
  }
  const std::size_t total = to;
  const unsigned cores = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  const unsigned threads =
      static_cast<unsigned>(std::min<std::size_t>(cores, total / (1u << 16) + 1));
  const auto draw = [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) {
      const Run& run = runs[i];
      for (std::size_t k = 0; k < run.count; ++k) {
        out[run.to + k] = SyntheticElement(whole, seed, tensor, run.from + k);
      }
    }
  };
  if (threads <= 1) {
    draw(0, runs.size());
    return;
  }
  std::vector<std::thread> pool;
  const std::size_t per = (runs.size() + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::size_t first = std::min(runs.size(), t * per);
    pool.emplace_back(draw, first, std::min(runs.size(), first + per));
  }
  for (std::thread& thread : pool) thread.join();
}

// Copies the picked elements of a whole tensor (already converted) to `out`.
void CopyPicks(const std::uint16_t* whole, const Picks& picks, std::uint16_t* out) {
  for (const Slice& s : picks.slices) {
    CopySlice(whole, picks.cols, s, out);
    out += s.elements();
  }
}

}  // namespace

absl::StatusOr<ModelWeights> ModelWeights::Generate(const DecoderConfig& config, std::uint64_t seed,
                                                    cudaStream_t stream, const Progress& progress,
                                                    TensorParallel tp) {
  BATON_RETURN_IF_ERROR(ValidateDecoderConfig(config));
  BATON_RETURN_IF_ERROR(ValidateTensorParallel(config, tp));
  using W = SyntheticWeight;
  const DecoderConfig& c = config;
  const std::size_t d = c.d_model;
  Layout layout;
  std::size_t step_elements = 0;
  // Places the picked elements of a whole-model tensor (none: absent);
  // `slot` elements (>= picked; the rest zero) for the padded vocabularies.
  auto place = [&](W weight, int layer, Picks picks, std::size_t slot = 0,
                   bool streamed = true) -> std::size_t {
    const std::size_t n = picks.elements();
    if (n == 0 && slot == 0) return SIZE_MAX;
    if (streamed) step_elements += n;
    const SyntheticTensor tensor = SyntheticTensorOf(c, weight, layer);
    return layout.AddPadded(n, std::max(slot, n),
                            [&c, seed, tensor, picks = std::move(picks)](std::uint16_t* out) {
                              DrawSynthetic(c, seed, tensor, picks, out);
                              return absl::OkStatus();
                            });
  };
  const auto slice = [&](WeightRole role) { return SliceOf(role, c, tp); };
  const std::size_t aw = c.attention_width(), kvw = c.kv_width();
  Offsets offsets;
  // The embedding: one row per token read, not streamed.
  offsets.embedding = place(W::kEmbedding, 0, Whole(c.vocab, d),
                            static_cast<std::size_t>(c.padded_vocab()) * d, /*streamed=*/false);
  for (int l = 0; l < c.layers; ++l) {
    std::array<std::size_t, 8> o;
    o.fill(SIZE_MAX);
    o[0] = place(W::kAttnNorm, l, Whole(d, 1));
    o[1] = place(W::kWqkv, l,
                 Picks{d, {slice(WeightRole::kQ), Shifted(slice(WeightRole::kK), aw),
                           Shifted(slice(WeightRole::kV), aw + kvw)}});
    if (c.qkv_bias) {
      o[2] = place(W::kQkvBias, l,
                   Picks{1, {slice(WeightRole::kQBias), Shifted(slice(WeightRole::kKBias), aw),
                             Shifted(slice(WeightRole::kVBias), aw + kvw)}});
    }
    o[3] = place(W::kWo, l, Picks{aw, {slice(WeightRole::kO)}});
    if (c.o_bias) o[4] = place(W::kOBias, l, Picks{1, {slice(WeightRole::kOBias)}});
    o[5] = place(W::kFfnNorm, l, Whole(d, 1));
    o[6] = place(W::kGateUp, l,
                 Picks{d, {slice(WeightRole::kGate), Shifted(slice(WeightRole::kUp), c.ffn)}});
    o[7] = place(W::kDown, l, Picks{static_cast<std::size_t>(c.ffn), {slice(WeightRole::kDown)}});
    offsets.layers.push_back(o);
  }
  offsets.final_norm = place(W::kFinalNorm, 0, Whole(d, 1));
  // The LM head's rows (the rank's share of the padded vocabulary): those
  // past the vocabulary are zero padding.
  Slice head = slice(WeightRole::kLmHead);
  const std::size_t head_rows = head.row_end - head.row_begin;
  head.row_end = std::min<std::size_t>(head.row_end, c.vocab);
  head.row_begin = std::min(head.row_begin, head.row_end);
  offsets.lm_head = place(W::kLmHead, 0, Picks{d, {head}}, head_rows * d);
  ModelWeights weights;
  BATON_RETURN_IF_ERROR(
      Upload(layout, config, offsets, stream, weights.arena_, weights.rope_, weights.tensors_,
             progress));
  weights.step_bytes_ = step_elements * sizeof(std::uint16_t);
  return weights;
}

absl::StatusOr<ModelWeights> ModelWeights::FromCheckpoint(const checkpoint::Checkpoint& ckpt,
                                                          const DecoderConfig& c,
                                                          cudaStream_t stream,
                                                          const Progress& progress,
                                                          TensorParallel tp) {
  BATON_RETURN_IF_ERROR(ValidateTensorParallel(c, tp));
  const checkpoint::ModelSpec& spec = ckpt.spec();
  const DecoderDType dtype = c.dtype;
  const std::size_t d = c.d_model;
  const bool sharded = tp.size > 1;
  Layout layout;
  std::size_t sharded_elements = 0;  // what a rank's step streams (tensor parallelism)
  // One tensor, converted, whole (the norms, and the embedding: vocabulary
  // rows padded to padded_vocab()).
  auto tensor = [&](const std::string& name, std::size_t slot = 0) -> std::size_t {
    const checkpoint::TensorView& view = ckpt.tensor(name);
    const std::size_t n = checkpoint::NumElements(view);
    return layout.AddPadded(n, std::max(slot, n), [&view, dtype](std::uint16_t* out) {
      return checkpoint::ConvertTensor(view, CheckpointDTypeOf(dtype), out);
    });
  };
  // Parts of tensors one after another, each converted (q and k permuted
  // for RoPE), whole or (tensor parallelism) the rank's slice of it, in a
  // slot of at least `slot` elements (the rest zero).
  struct Part {
    std::string name;
    int rope_heads;
    WeightRole role;
  };
  auto fused = [&](std::vector<Part> parts, std::size_t row, std::size_t slot = 0) -> std::size_t {
    std::size_t elements = 0;
    std::vector<Picks> picks;
    for (const Part& part : parts) {
      const checkpoint::TensorView& view = ckpt.tensor(part.name);
      const std::size_t n = checkpoint::NumElements(view);
      Picks p = Whole(n / row, row);
      if (sharded) {
        p.slices = {SliceOf(part.role, c, tp)};
        // (The LM head's share of the padded vocabulary: rows past the
        // checkpoint's are padding.)
        p.slices[0].row_end = std::min(p.slices[0].row_end, n / row);
        p.slices[0].row_begin = std::min(p.slices[0].row_begin, p.slices[0].row_end);
      }
      elements += p.elements();
      picks.push_back(std::move(p));
    }
    if (sharded) sharded_elements += elements;
    if (elements == 0 && slot == 0) return SIZE_MAX;
    return layout.AddPadded(
        elements, std::max(slot, elements),
        [&ckpt, parts, picks, row, dtype, sharded, hd = c.head_dim](std::uint16_t* out) {
          std::vector<std::uint16_t> whole;
          for (std::size_t i = 0; i < parts.size(); ++i) {
            const checkpoint::TensorView& view = ckpt.tensor(parts[i].name);
            if (!sharded) {
              BATON_RETURN_IF_ERROR(ConvertRows(view, dtype, parts[i].rope_heads, hd, row, out));
              out += checkpoint::NumElements(view);
              continue;
            }
            whole.resize(checkpoint::NumElements(view));
            BATON_RETURN_IF_ERROR(
                ConvertRows(view, dtype, parts[i].rope_heads, hd, row, whole.data()));
            CopyPicks(whole.data(), picks[i], out);
            out += picks[i].elements();
          }
          return absl::OkStatus();
        });
  };
  const std::size_t padded_vocab_elements = static_cast<std::size_t>(c.padded_vocab()) * d;
  Offsets offsets;
  offsets.embedding = tensor("model.embed_tokens.weight", padded_vocab_elements);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const std::string attn = p + "self_attn.";
    const int kv = c.key_value_heads();
    std::array<std::size_t, 8> o;
    o.fill(SIZE_MAX);
    o[0] = tensor(p + "input_layernorm.weight");
    o[1] = fused({{attn + "q_proj.weight", c.heads, WeightRole::kQ},
                  {attn + "k_proj.weight", kv, WeightRole::kK},
                  {attn + "v_proj.weight", 0, WeightRole::kV}},
                 d);
    if (c.qkv_bias) {
      o[2] = fused({{attn + "q_proj.bias", c.heads, WeightRole::kQBias},
                    {attn + "k_proj.bias", kv, WeightRole::kKBias},
                    {attn + "v_proj.bias", 0, WeightRole::kVBias}},
                   1);
    }
    o[3] = fused({{attn + "o_proj.weight", 0, WeightRole::kO}}, c.attention_width());
    if (c.o_bias) o[4] = fused({{attn + "o_proj.bias", 0, WeightRole::kOBias}}, 1);
    o[5] = tensor(p + "post_attention_layernorm.weight");
    o[6] = fused({{p + "mlp.gate_proj.weight", 0, WeightRole::kGate},
                  {p + "mlp.up_proj.weight", 0, WeightRole::kUp}},
                 d);
    o[7] = fused({{p + "mlp.down_proj.weight", 0, WeightRole::kDown}}, c.ffn);
    offsets.layers.push_back(o);
  }
  offsets.final_norm = tensor("model.norm.weight");
  const std::string head = spec.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  if (!sharded) {
    offsets.lm_head = spec.tie_word_embeddings ? offsets.embedding
                                               : tensor(head, padded_vocab_elements);
  } else {
    // A rank's rows of the LM head (of the embedding, when tied), in a slot
    // of its share of the padded vocabulary.
    offsets.lm_head = fused({{head, 0, WeightRole::kLmHead}}, d, padded_vocab_elements / tp.size);
  }
  ModelWeights weights;
  BATON_RETURN_IF_ERROR(
      Upload(layout, c, offsets, stream, weights.arena_, weights.rope_, weights.tensors_, progress));
  if (sharded) {
    // The norms, whole on every rank, beside the slices.
    weights.step_bytes_ = (sharded_elements + (2 * static_cast<std::size_t>(c.layers) + 1) * d) *
                          sizeof(std::uint16_t);
    return weights;
  }
  const std::size_t embedding_bytes = static_cast<std::size_t>(c.vocab) * d * sizeof(std::uint16_t);
  weights.step_bytes_ =
      ckpt.weight_bytes() / checkpoint::DTypeSize(ckpt.dtype()) * sizeof(std::uint16_t) -
      (spec.tie_word_embeddings ? 0 : embedding_bytes);
  return weights;
}

}  // namespace baton::detail
