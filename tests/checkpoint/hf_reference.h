// A CPU reference of a Llama-family decoder read straight from a checkpoint's
// Hugging Face tensors, with none of Baton's layout work: separate q/k/v and
// gate/up projections, RoPE in transformers' rotate-half convention (pair i
// is elements i and i + head_dim / 2), grouped-query attention by repeating
// key/value heads, biases as the checkpoint has them, the tied embedding as
// the LM head. In double, rounding to the model's 16-bit type exactly where
// Baton's kernels store in it (so the logits differ from the device's only
// by accumulation order and fast-math functions), which makes it a check of
// Baton's fusion, permutation and conversion.
#pragma once

#include <cstdint>
#include <vector>

#include "baton/decoder_config.h"
#include "checkpoint/checkpoint.h"
#include "support/model_reference.h"

namespace baton::reference {

class HfReference : public StepReference {
 public:
  // `config` is the DecoderConfig the model runs (dtype, rope, epsilon).
  HfReference(const checkpoint::Checkpoint& checkpoint, const DecoderConfig& config);

  // Feeds `token` at the next position and returns that step's logits
  // (rounded to the model's type, as floats).
  std::vector<float> Step(int token) override;
  void Reset() override;

 private:
  struct Layer {
    std::vector<float> attn_norm, q, k, v, q_bias, k_bias, v_bias, o, o_bias, ffn_norm, gate, up,
        down;
    std::vector<double> keys, values;  // [position][kv_width], rounded
  };
  [[nodiscard]] double Round(double x) const;
  [[nodiscard]] std::vector<float> Tensor(const checkpoint::Checkpoint& ckpt,
                                          const std::string& name) const;
  DecoderConfig c_;
  std::vector<float> inv_freq_;
  std::vector<float> embedding_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int position_ = 0;
};

}  // namespace baton::reference
