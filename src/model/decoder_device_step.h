// The decoder model's step as a device step program (its DeviceStepProgram):
// the plans the dynamic-parallelism scheduler walks from the device (the same
// nodes the graph path captures, ops/device_driver.cuh), with grids sized for
// the actual rows. Internal; Abseil-free.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace baton::detail {

// Device memory.
struct DecoderDeviceStep {
  // Baton's own kernels, by the step's bucket (StepHeader::bucket_size): the
  // GEMV plan with fused attention up to max_batch rows, the GEMM plan with
  // the appended chunks' attention above.
  const ops::OpNode* decode_ops = nullptr;
  std::uint32_t decode_count = 0;
  const ops::OpNode* prefill_ops = nullptr;
  std::uint32_t prefill_count = 0;
  std::uint32_t max_batch = 0;
};

// DeviceStepProgram::launch of the decoder model: Baton's dynamic-parallelism
// scheduler compiled into the model's own device link (dp_decoder_step.cu),
// `params` a DecoderDeviceStep in device memory.
[[nodiscard]] cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                                          cudaStream_t stream);

// Opts every kernel that `nodes` launch from the device in to the dynamic
// shared memory its largest launch takes (steps of up to `max_rows` rows and
// `max_batch` sequences), from the host, before the first device launch;
// cudaErrorNotSupported for a node the device step cannot launch.
[[nodiscard]] cudaError_t PrepareDecoderDynamicParallelism(const std::vector<ops::OpNode>& nodes,
                                                           std::uint32_t max_rows,
                                                           std::uint32_t max_batch);

}  // namespace baton::detail
