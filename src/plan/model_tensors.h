// The decoder's weights as the step reads them: device pointers in Baton's
// fused layouts (model_weights.h owns the memory and says what each layout
// is). Plain data, no Abseil: the step plan and the device step include it.
#pragma once

#include <vector>

namespace baton::detail {

// One layer, device pointers (a bias is null when the model has none).
struct LayerTensors {
  const void* attn_norm = nullptr;
  const void* wqkv = nullptr;
  const void* qkv_bias = nullptr;
  const void* wo = nullptr;
  const void* o_bias = nullptr;
  const void* ffn_norm = nullptr;
  const void* w_gate_up = nullptr;
  const void* w_down = nullptr;
};

struct ModelTensors {
  const void* embedding = nullptr;
  const void* final_norm = nullptr;
  const void* lm_head = nullptr;
  std::vector<LayerTensors> layers;
  const float* rope_inv_freq = nullptr;  // [head_dim / 2] (kernels/rope.h)
};

}  // namespace baton::detail
