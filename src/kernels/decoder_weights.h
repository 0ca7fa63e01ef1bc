// Deterministic weights for the decode-step model: every element is a pure
// function of (seed, tensor, index) through a counter-based hash, so any
// machine regenerates the same model bit for bit without storing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/decoder_config.h"

namespace baton {

// Raw 16-bit elements in the config's dtype (kernels/half_bits.h converts),
// row-major, laid out as the kernels and cuBLASLt plans read them: a linear
// layer's weight is [out_features, in_features].
struct DecoderLayerWeights {
  std::vector<std::uint16_t> attn_norm;  // [d_model]
  std::vector<std::uint16_t> wqkv;       // [qkv_width, d_model]: rows q | k | v (RoPE pairs
                                         // (2i, 2i + 1) of each head adjacent)
  std::vector<std::uint16_t> wo;         // [d_model, attention_width]
  std::vector<std::uint16_t> ffn_norm;   // [d_model]
  std::vector<std::uint16_t> w_gate_up;  // [gate_up_width, d_model]: rows gate | up
  std::vector<std::uint16_t> w_down;     // [d_model, ffn]
  std::vector<std::uint16_t> qkv_bias;   // [qkv_width] when config.qkv_bias, else empty
  std::vector<std::uint16_t> o_bias;     // [d_model] when config.o_bias, else empty
};

struct DecoderHostWeights {
  DecoderConfig config;
  std::uint64_t seed = 0;
  std::vector<std::uint16_t> embedding;  // [vocab, d_model]
  std::vector<DecoderLayerWeights> layers;
  std::vector<std::uint16_t> final_norm;  // [d_model]
  std::vector<std::uint16_t> lm_head;     // [vocab, d_model]

  // Bytes a decode step streams (every weight once): the HBM floor's numerator.
  [[nodiscard]] std::size_t bytes() const;
};

// A uniform in [-1, 1) for (seed, tensor, index): splitmix64 over a counter,
// so elements are independent of generation order (exposed for tests).
[[nodiscard]] double DecoderWeightUniform(std::uint64_t seed, std::uint64_t tensor,
                                          std::uint64_t index);

// The synthetic model's tensors, each drawn from its own counter stream.
enum class SyntheticWeight {
  kEmbedding, kFinalNorm, kLmHead,  // the model's
  kAttnNorm, kWqkv, kWo, kFfnNorm, kGateUp, kDown, kQkvBias, kOBias,  // a layer's
};
// How one tensor is drawn: element i is
// FloatToHalfBits(offset + amplitude * DecoderWeightUniform(seed, tag, i)),
// i its row-major index in the whole tensor (so a slice of it, a tensor-
// parallel rank's, is drawn without drawing the rest).
struct SyntheticTensor {
  std::uint64_t tag = 0;
  double offset = 0.0;
  double amplitude = 0.0;
};
[[nodiscard]] SyntheticTensor SyntheticTensorOf(const DecoderConfig& config, SyntheticWeight weight,
                                                int layer);
[[nodiscard]] std::uint16_t SyntheticElement(const DecoderConfig& config, std::uint64_t seed,
                                             const SyntheticTensor& tensor, std::size_t index);

// Linear weights ~ U(-a, a) with a = sqrt(3 / fan_in) (variance 1/fan_in, so
// activations keep unit scale layer to layer); norm weights 1 + U(-0.1, 0.1);
// the embedding has unit variance. InvalidArgument when the config does not
// validate (ValidateDecoderConfig's message).
[[nodiscard]] absl::StatusOr<DecoderHostWeights> GenerateDecoderWeights(const DecoderConfig& config,
                                                                        std::uint64_t seed);

}  // namespace baton
