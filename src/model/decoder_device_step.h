// The decoder model's step as a device step program (its DeviceStepProgram):
// everything the step needs, in one struct the model keeps in device memory.
// The dynamic-parallelism scheduler reads it and walks the same plan the
// graph path captures (dp_decoder_step.cu), with grids sized for the actual
// rows. Internal; Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "decoder_step.h"
#include "kernels/decode_kernels.h"
#include "step_plan.h"

namespace baton::detail {

// Device pointers; activations are [view.max_rows, width] (by row).
struct DecoderDeviceStep {
  DecoderStepView view;  // config, request table, per-row and per-position state
  // Baton's own kernels, by the step's bucket (StepHeader::bucket_size): the
  // GEMV plan with fused attention up to max_batch rows, the GEMM plan with
  // the appended chunks' attention above. Device memory.
  const StepOp* decode_ops = nullptr;
  std::uint32_t decode_count = 0;
  const StepOp* prefill_ops = nullptr;
  std::uint32_t prefill_count = 0;
  const float* rope_inv_freq = nullptr;
  StepBuffers buffers;
};

// DeviceStepProgram::launch of the decoder model: Baton's dynamic-parallelism
// scheduler compiled into the model's own device link (dp_decoder_step.cu),
// `params` a DecoderDeviceStep in device memory.
[[nodiscard]] cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                                          cudaStream_t stream);

// Sets what the device step's kernels need before their first device launch
// (the dynamic shared memory the GEMM and the chunk attention ask for), from
// the host. Once per process; every model calls it.
[[nodiscard]] cudaError_t PrepareDecoderDynamicParallelism();

}  // namespace baton::detail
