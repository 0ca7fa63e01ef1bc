#include "support/model_reference.h"

#include <cmath>

#include "kernels/half_bits.h"
#include "kernels/rope.h"
#include "support/decode_reference.h"

namespace baton::reference {

ReferenceDecoder::ReferenceDecoder(const DecoderHostWeights& weights)
    : config_(weights.config),
      inv_freq_(RopeInverseFrequencies(weights.config.rope, weights.config.head_dim)) {
  const DecoderDType dtype = config_.dtype;
  embedding_ = ToFloat(weights.embedding, dtype);
  final_norm_ = ToFloat(weights.final_norm, dtype);
  lm_head_ = ToFloat(weights.lm_head, dtype);
  for (const DecoderLayerWeights& w : weights.layers) {
    Layer layer;
    layer.attn_norm = ToFloat(w.attn_norm, dtype);
    layer.wqkv = ToFloat(w.wqkv, dtype);
    layer.wo = ToFloat(w.wo, dtype);
    layer.ffn_norm = ToFloat(w.ffn_norm, dtype);
    layer.w_gate_up = ToFloat(w.w_gate_up, dtype);
    layer.w_down = ToFloat(w.w_down, dtype);
    layer.qkv_bias = ToFloat(w.qkv_bias, dtype);
    layer.o_bias = ToFloat(w.o_bias, dtype);
    layers_.push_back(std::move(layer));
  }
}

void ReferenceDecoder::Reset() {
  for (Layer& layer : layers_) {
    layer.keys.clear();
    layer.values.clear();
  }
  position_ = 0;
}

double ReferenceDecoder::Round(double x) const {
  return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(x), config_.dtype), config_.dtype);
}

std::vector<float> ReferenceDecoder::Step(int token) {
  const DecoderConfig& c = config_;
  const int d = c.d_model, width = c.attention_width(), hd = c.head_dim;
  auto rounded = [&](const std::vector<double>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(Round(v[i]));
    return out;
  };
  std::vector<float> hidden(embedding_.begin() + static_cast<std::size_t>(token) * d,
                            embedding_.begin() + static_cast<std::size_t>(token + 1) * d);
  const int kv_width = c.kv_width(), group = c.group_size();
  // y = W · x (+ bias), rounded once, as the device stores it.
  auto project = [&](const std::vector<float>& w, const std::vector<float>& bias,
                     const std::vector<float>& x, int out, int in) {
    std::vector<double> y = Gemv(w.data(), x.data(), out, in);
    if (!bias.empty()) {
      for (int i = 0; i < out; ++i) y[i] += bias[i];
    }
    return rounded(y);
  };
  for (Layer& layer : layers_) {
    const std::vector<float> normed =
        rounded(RmsNorm(hidden.data(), layer.attn_norm.data(), d, c.rms_epsilon));
    std::vector<double> qkv(c.qkv_width());
    {
      const std::vector<float> q = project(layer.wqkv, layer.qkv_bias, normed, c.qkv_width(), d);
      for (int i = 0; i < c.qkv_width(); ++i) qkv[i] = q[i];
    }
    for (int h = 0; h < c.heads; ++h) Rope(&qkv[h * hd], hd, position_, inv_freq_);
    for (int h = 0; h < c.key_value_heads(); ++h) {
      Rope(&qkv[width + h * hd], hd, position_, inv_freq_);
    }
    for (int i = 0; i < width; ++i) qkv[i] = Round(qkv[i]);
    for (int i = 0; i < kv_width; ++i) {
      layer.keys.push_back(Round(qkv[width + i]));
      layer.values.push_back(qkv[width + kv_width + i]);
    }
    const int context = position_ + 1;
    std::vector<double> attention(width);
    for (int h = 0; h < c.heads; ++h) {
      const int kh = h / group;
      std::vector<double> q(qkv.begin() + h * hd, qkv.begin() + (h + 1) * hd);
      std::vector<double> keys(static_cast<std::size_t>(context) * hd), values(keys.size());
      for (int t = 0; t < context; ++t) {
        for (int e = 0; e < hd; ++e) {
          keys[static_cast<std::size_t>(t) * hd + e] = layer.keys[t * kv_width + kh * hd + e];
          values[static_cast<std::size_t>(t) * hd + e] = layer.values[t * kv_width + kh * hd + e];
        }
      }
      const std::vector<double> out = Attention(q, keys, values, hd);
      for (int e = 0; e < hd; ++e) attention[h * hd + e] = out[e];
    }
    const std::vector<float> attention_rounded = rounded(attention);
    const std::vector<float> projected =
        project(layer.wo, layer.o_bias, attention_rounded, d, width);
    for (int i = 0; i < d; ++i) hidden[i] += projected[i];
    const std::vector<float> normed2 =
        rounded(RmsNorm(hidden.data(), layer.ffn_norm.data(), d, c.rms_epsilon));
    const std::vector<float> gate_up =
        rounded(Gemv(layer.w_gate_up.data(), normed2.data(), c.gate_up_width(), d));
    std::vector<double> act(c.ffn);
    for (int i = 0; i < c.ffn; ++i) act[i] = SiluMul(gate_up[i], gate_up[c.ffn + i]);
    const std::vector<float> act_rounded = rounded(act);
    const std::vector<float> down =
        rounded(Gemv(layer.w_down.data(), act_rounded.data(), d, c.ffn));
    for (int i = 0; i < d; ++i) hidden[i] += down[i];
  }
  const std::vector<float> normed =
      rounded(RmsNorm(hidden.data(), final_norm_.data(), d, c.rms_epsilon));
  ++position_;
  return rounded(Gemv(lm_head_.data(), normed.data(), c.vocab, d));
}

}  // namespace baton::reference
