// Tensor parallelism's split of the decoder's weights (issue #42): which
// slice of each checkpoint tensor a rank holds, and the shape a rank's step
// runs. Megatron's split, as vLLM and TensorRT-LLM apply it to Llama:
//
//   q | k | v, gate | up   by output rows (column-parallel): a rank holds
//                          heads / size query heads, kv_heads / size key/value
//                          heads and ffn / size of the FFN's hidden width, so
//                          its attention and SiLU-gate run on its own rows
//   o_proj, down_proj      by input columns (row-parallel): a rank's product
//                          is a partial sum; the all-reduce adds the ranks'
//                          (collective/all_reduce.cuh) before the residual
//   lm_head                by vocabulary rows (each rank's logits for its ids;
//                          selection gathers them)
//   embedding, norms       whole on every rank; o_proj's bias on rank 0 only
//                          (added once to the reduced sum)
//
// Query heads map to their key/value head as h / (heads / kv_heads); a
// rank's query heads [r H / n, (r + 1) H / n) map exactly onto its
// key/value heads [r KV / n, (r + 1) KV / n), so grouped-query attention
// needs nothing from another rank. Plain C++ (host); the loader and the
// sharded step are still to come (docs/DESIGN.md, "Collectives").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "baton/decoder_config.h"

namespace baton::detail {

struct TensorParallel {
  int size = 1;  // ranks
  int rank = 0;
};

// InvalidArgument naming the shape that does not divide (query heads,
// key/value heads, the FFN width, the vocabulary's padded rows) or a rank
// out of range; the fix is a size that divides the key/value heads.
[[nodiscard]] absl::Status ValidateTensorParallel(const DecoderConfig& config, TensorParallel tp);

// The shape one rank's step runs: heads, kv_heads and ffn divided by the
// size (the rest of the config whole; the LM head's rows in VocabRows).
[[nodiscard]] DecoderConfig RankConfig(const DecoderConfig& config, TensorParallel tp);

// A checkpoint tensor's role in the split.
enum class WeightRole {
  kQ, kK, kV,               // [heads or kv_heads * head_dim, d_model]: rows by heads
  kQBias, kKBias, kVBias,   // their biases: the same rows
  kGate, kUp,               // [ffn, d_model]: rows
  kO,                       // [d_model, heads * head_dim]: columns by query heads
  kDown,                    // [d_model, ffn]: columns
  kOBias,                   // [d_model]: rank 0 only
  kLmHead,                  // [padded_vocab, d_model]: rows
  kReplicated,              // the embedding, the norms: whole everywhere
};

// Rows [row_begin, row_end) by columns [col_begin, col_end) of a row-major
// [rows, cols] tensor (a vector is [rows, 1]); empty: the rank holds none.
struct Slice {
  std::size_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  [[nodiscard]] std::size_t elements() const {
    return (row_end - row_begin) * (col_end - col_begin);
  }
};

// Rank tp.rank's slice of a tensor of `role` (its full shape from `config`).
// Call after ValidateTensorParallel.
[[nodiscard]] Slice SliceOf(WeightRole role, const DecoderConfig& config, TensorParallel tp);
// The full tensor's [rows, cols] for a role.
void FullShape(WeightRole role, const DecoderConfig& config, std::size_t& rows, std::size_t& cols);

// Copies a slice of a row-major [rows, cols] tensor into `out`
// (slice.elements() elements, row-major).
template <class T>
void CopySlice(const T* full, std::size_t cols, const Slice& slice, T* out) {
  for (std::size_t r = slice.row_begin; r < slice.row_end; ++r) {
    for (std::size_t c = slice.col_begin; c < slice.col_end; ++c) *out++ = full[r * cols + c];
  }
}

}  // namespace baton::detail
