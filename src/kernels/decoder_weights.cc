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
enum Tensor : std::uint64_t {
  kEmbedding = 1,
  kFinalNorm = 2,
  kLmHead = 3,
  kAttnNorm = 0,
  kWqkv = 1,
  kWo = 2,
  kFfnNorm = 3,
  kGateUp = 4,
  kDown = 5,
  kQkvBias = 6,
  kOBias = 7,
};
std::uint64_t LayerTensor(int layer, std::uint64_t k) { return 16 + 8 * layer + k; }

std::vector<std::uint16_t> Fill(const DecoderConfig& config, std::uint64_t seed,
                                std::uint64_t tensor, std::size_t count, double offset,
                                double amplitude) {
  std::vector<std::uint16_t> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double value = offset + amplitude * DecoderWeightUniform(seed, tensor, i);
    out[i] = FloatToHalfBits(static_cast<float>(value), config.dtype);
  }
  return out;
}

std::vector<std::uint16_t> Linear(const DecoderConfig& config, std::uint64_t seed,
                                  std::uint64_t tensor, int out_features, int in_features) {
  return Fill(config, seed, tensor, static_cast<std::size_t>(out_features) * in_features, 0.0,
              std::sqrt(3.0 / in_features));
}

std::vector<std::uint16_t> Norm(const DecoderConfig& config, std::uint64_t seed,
                                std::uint64_t tensor) {
  return Fill(config, seed, tensor, config.d_model, 1.0, 0.1);
}

}  // namespace

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
  weights.embedding =
      Fill(config, seed, kEmbedding, static_cast<std::size_t>(config.vocab) * config.d_model, 0.0,
           std::sqrt(3.0));
  for (int l = 0; l < config.layers; ++l) {
    DecoderLayerWeights layer;
    layer.attn_norm = Norm(config, seed, LayerTensor(l, kAttnNorm));
    layer.wqkv = Linear(config, seed, LayerTensor(l, kWqkv), config.qkv_width(), config.d_model);
    layer.wo = Linear(config, seed, LayerTensor(l, kWo), config.d_model, config.attention_width());
    layer.ffn_norm = Norm(config, seed, LayerTensor(l, kFfnNorm));
    layer.w_gate_up =
        Linear(config, seed, LayerTensor(l, kGateUp), config.gate_up_width(), config.d_model);
    layer.w_down = Linear(config, seed, LayerTensor(l, kDown), config.d_model, config.ffn);
    if (config.qkv_bias) {
      layer.qkv_bias = Fill(config, seed, LayerTensor(l, kQkvBias), config.qkv_width(), 0.0, 0.5);
    }
    if (config.o_bias) {
      layer.o_bias = Fill(config, seed, LayerTensor(l, kOBias), config.d_model, 0.0, 0.5);
    }
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = Norm(config, seed, kFinalNorm);
  weights.lm_head = Linear(config, seed, kLmHead, config.vocab, config.d_model);
  return weights;
}

}  // namespace baton
