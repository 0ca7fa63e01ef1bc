// A CPU reference of the whole decoder model (baton/decoder_model.h): the
// same weights (grouped-query attention, biases and RoPE scaling as the
// config says), the same math in double, rounding to the storage type
// exactly where the device stores in it (normed activations, projections,
// the KV cache, attention and FFN outputs, logits), so its logits differ from
// the device's only by accumulation order and fast-math functions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decoder_weights.h"

namespace baton::reference {

// A model one token at a time, for teacher-forced comparisons
// (testing::CheckAgainstReference).
class StepReference {
 public:
  virtual ~StepReference() = default;
  // Feeds `token` at the next position of the one sequence it holds and
  // returns that step's logits (rounded to the storage type, as floats).
  virtual std::vector<float> Step(int token) = 0;
  // Forgets the sequence (empties the KV cache).
  virtual void Reset() = 0;
};

class ReferenceDecoder : public StepReference {
 public:
  explicit ReferenceDecoder(const DecoderHostWeights& weights);

  std::vector<float> Step(int token) override;
  void Reset() override;
  [[nodiscard]] int position() const { return position_; }

 private:
  struct Layer {
    std::vector<float> attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down, qkv_bias, o_bias;
    std::vector<double> keys, values;  // [position][kv_width], rounded to the dtype
  };
  [[nodiscard]] double Round(double x) const;
  DecoderConfig config_;
  std::vector<float> inv_freq_;
  std::vector<float> embedding_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int position_ = 0;
};

}  // namespace baton::reference
