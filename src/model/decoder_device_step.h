// The decoder model's step as a device step program (its DeviceStepProgram):
// everything the step needs, in one struct the model keeps in device memory.
// The dynamic-parallelism scheduler reads it and launches the same kernel
// bodies the graph path captures (src/dynamic_parallelism/dp_decoder_step.cu),
// with grids sized for the actual batch. Internal; Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "decoder_step.h"
#include "kernels/decode_kernels.h"

namespace baton::detail {

// One layer's weights (the config's dtype) and KV cache, device pointers.
struct DecoderLayerView {
  const void* attn_norm = nullptr;
  const void* wqkv = nullptr;
  const void* wo = nullptr;
  const void* ffn_norm = nullptr;
  const void* w_gate_up = nullptr;
  const void* w_down = nullptr;
  KvCacheLayer cache;
};

// Device pointers; activations are [view.max_batch, width] (by batch position).
struct DecoderDeviceStep {
  DecoderStepView view;  // config, request table, per-position and per-slot state
  const void* embedding = nullptr;
  const void* final_norm = nullptr;
  const void* lm_head = nullptr;
  const DecoderLayerView* layers = nullptr;  // [view.config.layers]
  float* hidden = nullptr;                   // the fp32 residual stream
  void* normed = nullptr;                    // RMSNorm output where a GEMV does not fuse it
  void* qkv = nullptr;
  void* attention = nullptr;
  void* gate_up = nullptr;
  void* logits = nullptr;
  SamplingParams sampling{0.0f, 0};  // temperature <= 0: greedy
};

// DeviceStepProgram::launch of the decoder model: Baton's dynamic-parallelism
// scheduler compiled into the model's own device link (dp_decoder_step.cu),
// `params` a DecoderDeviceStep in device memory.
[[nodiscard]] cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                                          cudaStream_t stream);

}  // namespace baton::detail
