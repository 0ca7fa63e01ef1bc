#include "plan/tensor_parallel.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/decoder_config_check.h"

namespace baton::detail {

absl::Status ValidateTensorParallel(const DecoderConfig& c, TensorParallel tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor parallelism: rank %d of %d ranks; the size must be >= 1 and the rank in [0, size)",
        tp.rank, tp.size));
  }
  const struct {
    const char* what;
    int value;
  } shapes[] = {{"key/value heads", c.key_value_heads()},
                {"query heads", c.heads},
                {"the FFN width (ffn)", c.ffn},
                {"the LM head's padded vocabulary rows", c.padded_vocab()}};
  for (const auto& s : shapes) {
    if (s.value % tp.size != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tensor parallelism over %d ranks: %s (%d) do not divide by it; use a size that divides "
          "the key/value heads (%d) and the other shapes",
          tp.size, s.what, s.value, c.key_value_heads()));
    }
  }
  // Each rank's logits are whole 16-byte rows, gathered side by side.
  if (c.padded_vocab() / tp.size % kDecoderRowAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor parallelism over %d ranks: the LM head's padded vocabulary rows (%d) split into "
        "%d rows a rank, not a multiple of %d (16-byte rows); use fewer ranks",
        tp.size, c.padded_vocab(), c.padded_vocab() / tp.size, kDecoderRowAlignment));
  }
  if (tp.size > 1) {
    if (const absl::Status rank = ValidateDecoderConfig(RankConfig(c, tp)); !rank.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor parallelism over ", tp.size,
                                                     " ranks: a rank's share of the model: ",
                                                     rank.message(), "; use fewer ranks"));
    }
  }
  return absl::OkStatus();
}

DecoderConfig RankConfig(const DecoderConfig& c, TensorParallel tp) {
  DecoderConfig r = c;
  r.heads = c.heads / tp.size;
  r.kv_heads = c.key_value_heads() / tp.size;
  r.ffn = c.ffn / tp.size;
  return r;
}

void FullShape(WeightRole role, const DecoderConfig& c, std::size_t& rows, std::size_t& cols) {
  const std::size_t d = c.d_model;
  switch (role) {
    case WeightRole::kQ: rows = c.attention_width(); cols = d; return;
    case WeightRole::kK:
    case WeightRole::kV: rows = c.kv_width(); cols = d; return;
    case WeightRole::kQBias: rows = c.attention_width(); cols = 1; return;
    case WeightRole::kKBias:
    case WeightRole::kVBias: rows = c.kv_width(); cols = 1; return;
    case WeightRole::kGate:
    case WeightRole::kUp: rows = c.ffn; cols = d; return;
    case WeightRole::kO: rows = d; cols = c.attention_width(); return;
    case WeightRole::kDown: rows = d; cols = c.ffn; return;
    case WeightRole::kOBias: rows = d; cols = 1; return;
    case WeightRole::kLmHead: rows = c.padded_vocab(); cols = d; return;
    case WeightRole::kReplicated: rows = 0; cols = 0; return;
  }
}

Slice SliceOf(WeightRole role, const DecoderConfig& c, TensorParallel tp) {
  std::size_t rows = 0, cols = 0;
  FullShape(role, c, rows, cols);
  Slice s{0, rows, 0, cols};
  const auto part = [&](std::size_t n, std::size_t& begin, std::size_t& end) {
    begin = n / tp.size * tp.rank;
    end = begin + n / tp.size;
  };
  switch (role) {
    case WeightRole::kQ: case WeightRole::kK: case WeightRole::kV:
    case WeightRole::kQBias: case WeightRole::kKBias: case WeightRole::kVBias:
    case WeightRole::kGate: case WeightRole::kUp: case WeightRole::kLmHead:
      part(rows, s.row_begin, s.row_end);  // whole heads: rows is heads * head_dim
      break;
    case WeightRole::kO: case WeightRole::kDown:
      part(cols, s.col_begin, s.col_end);
      break;
    case WeightRole::kOBias:
      if (tp.rank != 0) s.row_end = 0;
      break;
    case WeightRole::kReplicated:
      break;
  }
  return s;
}

}  // namespace baton::detail
