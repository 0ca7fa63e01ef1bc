#include "hf_reference.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "checkpoint/convert.h"
#include "kernels/half_bits.h"
#include "kernels/rope.h"
#include "support/decode_reference.h"

namespace baton::reference {

std::vector<float> HfReference::Tensor(const checkpoint::Checkpoint& ckpt,
                                       const std::string& name) const {
  const checkpoint::TensorView* view = ckpt.find(name);
  if (view == nullptr) return {};
  std::vector<std::uint16_t> bits(checkpoint::NumElements(*view));
  const checkpoint::DType target = c_.dtype == DecoderDType::kBFloat16
                                       ? checkpoint::DType::kBFloat16
                                       : checkpoint::DType::kFloat16;
  if (!checkpoint::ConvertTensor(*view, target, bits.data()).ok()) return {};
  return ToFloat(bits, c_.dtype);
}

HfReference::HfReference(const checkpoint::Checkpoint& ckpt, const DecoderConfig& config)
    : c_(config), inv_freq_(RopeInverseFrequencies(config.rope, config.head_dim)) {
  embedding_ = Tensor(ckpt, "model.embed_tokens.weight");
  final_norm_ = Tensor(ckpt, "model.norm.weight");
  lm_head_ = ckpt.spec().tie_word_embeddings ? embedding_ : Tensor(ckpt, "lm_head.weight");
  for (int l = 0; l < c_.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    Layer layer;
    layer.attn_norm = Tensor(ckpt, p + "input_layernorm.weight");
    layer.q = Tensor(ckpt, p + "self_attn.q_proj.weight");
    layer.k = Tensor(ckpt, p + "self_attn.k_proj.weight");
    layer.v = Tensor(ckpt, p + "self_attn.v_proj.weight");
    layer.q_bias = Tensor(ckpt, p + "self_attn.q_proj.bias");
    layer.k_bias = Tensor(ckpt, p + "self_attn.k_proj.bias");
    layer.v_bias = Tensor(ckpt, p + "self_attn.v_proj.bias");
    layer.o = Tensor(ckpt, p + "self_attn.o_proj.weight");
    layer.o_bias = Tensor(ckpt, p + "self_attn.o_proj.bias");
    layer.ffn_norm = Tensor(ckpt, p + "post_attention_layernorm.weight");
    layer.gate = Tensor(ckpt, p + "mlp.gate_proj.weight");
    layer.up = Tensor(ckpt, p + "mlp.up_proj.weight");
    layer.down = Tensor(ckpt, p + "mlp.down_proj.weight");
    layers_.push_back(std::move(layer));
  }
}

void HfReference::Reset() {
  for (Layer& layer : layers_) {
    layer.keys.clear();
    layer.values.clear();
  }
  position_ = 0;
}

double HfReference::Round(double x) const {
  return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(x), c_.dtype), c_.dtype);
}

std::vector<float> HfReference::Step(int token) {
  const int d = c_.d_model, hd = c_.head_dim, half = hd / 2;
  const int heads = c_.heads, kv_heads = c_.key_value_heads(), group = heads / kv_heads;
  auto linear = [&](const std::vector<float>& w, const std::vector<float>& bias,
                    const std::vector<float>& x, int out, int in) {
    std::vector<double> y = Gemv(w.data(), x.data(), out, in);
    for (int i = 0; i < out && !bias.empty(); ++i) y[i] += bias[i];
    std::vector<float> rounded(out);
    for (int i = 0; i < out; ++i) rounded[i] = static_cast<float>(Round(y[i]));
    return rounded;
  };
  auto norm = [&](const std::vector<double>& h, const std::vector<float>& w) {
    std::vector<float> x(h.begin(), h.end());
    const std::vector<double> n = RmsNorm(x.data(), w.data(), d, c_.rms_epsilon);
    std::vector<float> out(d);
    for (int i = 0; i < d; ++i) out[i] = static_cast<float>(Round(n[i]));
    return out;
  };
  // transformers' rotate_half: pair i is (x[i], x[i + half]).
  auto rope = [&](std::vector<double>& head) {
    for (int i = 0; i < half; ++i) {
      const double angle = position_ * static_cast<double>(inv_freq_[i]);
      const double cs = std::cos(angle), sn = std::sin(angle);
      const double x1 = head[i], x2 = head[i + half];
      head[i] = x1 * cs - x2 * sn;
      head[i + half] = x2 * cs + x1 * sn;
    }
  };
  std::vector<double> hidden(embedding_.begin() + static_cast<std::size_t>(token) * d,
                             embedding_.begin() + static_cast<std::size_t>(token + 1) * d);
  for (Layer& layer : layers_) {
    const std::vector<float> x = norm(hidden, layer.attn_norm);
    const std::vector<float> q = linear(layer.q, layer.q_bias, x, heads * hd, d);
    const std::vector<float> k = linear(layer.k, layer.k_bias, x, kv_heads * hd, d);
    const std::vector<float> v = linear(layer.v, layer.v_bias, x, kv_heads * hd, d);
    for (int h = 0; h < kv_heads; ++h) {
      std::vector<double> kh(k.begin() + h * hd, k.begin() + (h + 1) * hd);
      rope(kh);
      for (int e = 0; e < hd; ++e) layer.keys.push_back(Round(kh[e]));
    }
    for (float value : v) layer.values.push_back(value);
    const int context = position_ + 1;
    std::vector<float> attention(heads * hd);
    for (int h = 0; h < heads; ++h) {
      std::vector<double> qh(q.begin() + h * hd, q.begin() + (h + 1) * hd);
      rope(qh);
      for (double& e : qh) e = Round(e);
      const int kv = h / group;  // repeat_kv
      std::vector<double> keys, values;
      for (int t = 0; t < context; ++t) {
        for (int e = 0; e < hd; ++e) {
          keys.push_back(layer.keys[(static_cast<std::size_t>(t) * kv_heads + kv) * hd + e]);
          values.push_back(layer.values[(static_cast<std::size_t>(t) * kv_heads + kv) * hd + e]);
        }
      }
      const std::vector<double> out = Attention(qh, keys, values, hd);
      for (int e = 0; e < hd; ++e) attention[h * hd + e] = static_cast<float>(Round(out[e]));
    }
    const std::vector<float> o = linear(layer.o, layer.o_bias, attention, d, heads * hd);
    for (int i = 0; i < d; ++i) hidden[i] += o[i];
    const std::vector<float> y = norm(hidden, layer.ffn_norm);
    const std::vector<float> gate = linear(layer.gate, {}, y, c_.ffn, d);
    const std::vector<float> up = linear(layer.up, {}, y, c_.ffn, d);
    std::vector<float> act(c_.ffn);
    for (int i = 0; i < c_.ffn; ++i) act[i] = static_cast<float>(Round(SiluMul(gate[i], up[i])));
    const std::vector<float> down = linear(layer.down, {}, act, d, c_.ffn);
    for (int i = 0; i < d; ++i) hidden[i] += down[i];
  }
  ++position_;
  return linear(lm_head_, {}, norm(hidden, final_norm_), c_.vocab, d);
}

}  // namespace baton::reference
