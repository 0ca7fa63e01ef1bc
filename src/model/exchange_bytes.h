// The largest all-reduce a tensor-parallel rank of the decoder exchanges in
// one step: a step's rows of the hidden state, or every sequence's slice of
// the logits (gathered so every rank picks from the whole row). Both are
// 16-bit. What PeerGroupOptions::max_bytes must hold; DecoderModel's init
// checks it and TensorParallelExchangeBytes (baton/decoder_model.h) says it.
// Internal to the model; pure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "baton/decoder_config.h"

namespace baton::detail {

[[nodiscard]] inline std::size_t LogitsSliceRows(const DecoderConfig& config, int size) {
  return static_cast<std::size_t>(config.padded_vocab() / size);
}

[[nodiscard]] inline std::size_t ExchangeBytes(const DecoderConfig& config, std::uint32_t max_rows,
                                               std::uint32_t max_batch, int size) {
  const std::size_t rows_bytes = std::size_t{max_rows} * config.d_model * sizeof(std::uint16_t);
  const std::size_t logits_bytes =
      std::size_t{max_batch} * LogitsSliceRows(config, size) * sizeof(std::uint16_t);
  return std::max(rows_bytes, logits_bytes);
}

}  // namespace baton::detail
