#include "kernels/decoder_weights.h"

#include <cmath>

#include "baton/status.h"
#include "kernels/decoder_config_check.h"
#include "kernels/half_bits.h"

namespace baton {
namespace {

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Tensor tags: layer l's tensors are 16 + 8 * l + k, so no two tensors share
// a counter stream.
std::uint64_t LayerTensor(int layer, std::uint64_t k) { return 16 + 8 * layer + k; }

std::vector<std::uint16_t> Fill(const DecoderConfig& config, std::uint64_t seed,
                                SyntheticWeight weight, int layer, std::size_t count) {
  const SyntheticTensor tensor = SyntheticTensorOf(config, weight, layer);
  std::vector<std::uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = SyntheticElement(config, seed, tensor, i);
  return out;
}

}  // namespace

SyntheticTensor SyntheticTensorOf(const DecoderConfig& c, SyntheticWeight weight, int layer) {
  using W = SyntheticWeight;
  // A linear layer's weights have variance 1 / fan_in.
  const auto linear = [](std::uint64_t tag, int in_features) {
    return SyntheticTensor{tag, 0.0, std::sqrt(3.0 / in_features)};
  };
  switch (weight) {
    case W::kEmbedding: return {1, 0.0, std::sqrt(3.0)};
    case W::kFinalNorm: return {2, 1.0, 0.1};
    case W::kLmHead: return linear(3, c.d_model);
    case W::kAttnNorm: return {LayerTensor(layer, 0), 1.0, 0.1};
    case W::kWqkv: return linear(LayerTensor(layer, 1), c.d_model);
    case W::kWo: return linear(LayerTensor(layer, 2), c.attention_width());
    case W::kFfnNorm: return {LayerTensor(layer, 3), 1.0, 0.1};
    case W::kGateUp: return linear(LayerTensor(layer, 4), c.d_model);
    case W::kDown: return linear(LayerTensor(layer, 5), c.ffn);
    case W::kQkvBias: return {LayerTensor(layer, 6), 0.0, 0.5};
    case W::kOBias: return {LayerTensor(layer, 7), 0.0, 0.5};
  }
  return {};
}

std::uint16_t SyntheticElement(const DecoderConfig& config, std::uint64_t seed,
                               const SyntheticTensor& tensor, std::size_t index) {
  const double value = tensor.offset + tensor.amplitude * DecoderWeightUniform(seed, tensor.tag, index);
  return FloatToHalfBits(static_cast<float>(value), config.dtype);
}

double DecoderWeightUniform(std::uint64_t seed, std::uint64_t tensor, std::uint64_t index) {
  const std::uint64_t bits = SplitMix64(SplitMix64(seed ^ SplitMix64(tensor)) + index);
  return static_cast<double>(bits >> 11) * 0x1.0p-52 - 1.0;  // 53 bits -> [-1, 1)
}

std::size_t DecoderHostWeights::bytes() const {
  std::size_t elements = embedding.size() + final_norm.size() + lm_head.size();
  for (const DecoderLayerWeights& layer : layers) {
    elements += layer.attn_norm.size() + layer.wqkv.size() + layer.wo.size() +
                layer.ffn_norm.size() + layer.w_gate_up.size() + layer.w_down.size() +
                layer.qkv_bias.size() + layer.o_bias.size();
  }
  return elements * sizeof(std::uint16_t);
}

absl::StatusOr<DecoderHostWeights> GenerateDecoderWeights(const DecoderConfig& config,
                                                          std::uint64_t seed) {
  BATON_RETURN_IF_ERROR(ValidateDecoderConfig(config));
  DecoderHostWeights weights;
  weights.config = config;
  weights.seed = seed;
  using W = SyntheticWeight;
  const std::size_t d = config.d_model;
  weights.embedding = Fill(config, seed, W::kEmbedding, 0, config.vocab * d);
  for (int l = 0; l < config.layers; ++l) {
    DecoderLayerWeights layer;
    layer.attn_norm = Fill(config, seed, W::kAttnNorm, l, d);
    layer.wqkv = Fill(config, seed, W::kWqkv, l, config.qkv_width() * d);
    layer.wo = Fill(config, seed, W::kWo, l, d * config.attention_width());
    layer.ffn_norm = Fill(config, seed, W::kFfnNorm, l, d);
    layer.w_gate_up = Fill(config, seed, W::kGateUp, l, config.gate_up_width() * d);
    layer.w_down = Fill(config, seed, W::kDown, l, d * config.ffn);
    if (config.qkv_bias) layer.qkv_bias = Fill(config, seed, W::kQkvBias, l, config.qkv_width());
    if (config.o_bias) layer.o_bias = Fill(config, seed, W::kOBias, l, d);
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = Fill(config, seed, W::kFinalNorm, 0, d);
  weights.lm_head = Fill(config, seed, W::kLmHead, 0, config.vocab * d);
  return weights;
}

}  // namespace baton
