// The decoder model's step as a device step program (its DeviceStepProgram):
// everything the step needs, in one struct the model keeps in device memory.
// The dynamic-parallelism scheduler reads it and walks the same plan the
// graph path captures (dp_decoder_step.cu), with grids sized for the actual
// batch. Internal; Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "decoder_step.h"
#include "kernels/decode_kernels.h"
#include "step_plan.h"

namespace baton::detail {

// Device pointers; activations are [view.max_batch, width] (by batch position).
struct DecoderDeviceStep {
  DecoderStepView view;         // config, request table, per-position and per-slot state
  const StepOp* ops = nullptr;  // the GEMV plan (step_plan.h), device memory
  std::uint32_t op_count = 0;
  const float* rope_inv_freq = nullptr;
  float* hidden = nullptr;  // the fp32 residual stream
  void* normed = nullptr;   // a row norm's output
  void* qkv = nullptr;
  void* attention = nullptr;
  void* logits = nullptr;
  const std::int32_t* in_tokens = nullptr;
};

// DeviceStepProgram::launch of the decoder model: Baton's dynamic-parallelism
// scheduler compiled into the model's own device link (dp_decoder_step.cu),
// `params` a DecoderDeviceStep in device memory.
[[nodiscard]] cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                                          cudaStream_t stream);

}  // namespace baton::detail
