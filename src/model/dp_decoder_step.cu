// The decoder model's step launched from the device (its DeviceStepProgram):
// Baton's dynamic-parallelism scheduler and the op table's device driver
// (ops/device_driver.cuh) compiled into this library's own device link,
// walking the plan for the step's bucket (plan/step_plan.h: the GEMV plan
// with fused attention up to max_batch rows, the GEMM plan with the appended
// chunks' attention above) with grids sized for the actual rows and
// sequences.
#include "decoder_device_step.h"
#include "engines/dp_scheduler.cuh"
#include "frame/step_view.h"
#include "ops/device_driver.cuh"

namespace baton::detail {

// The step Baton's dynamic-parallelism scheduler launches (engines/dp_scheduler.cuh).
struct DecoderDeviceStepKernels {
  static __device__ DeviceStepLaunch launch(const StepArgs& args, const void* params,
                                            std::uint32_t batch) {
    const DecoderDeviceStep& step = *static_cast<const DecoderDeviceStep*>(params);
    ops::OpFrame frame;
    frame.args = args;
    frame.rows = args.header->tokens;
    frame.sequences = batch;
    frame.serial = true;
    const bool chunks = IsChunkStep(args.header->bucket_size, step.max_batch);
    const ops::DeviceLaunches launched =
        ops::launch_from_device(chunks ? step.prefill_ops : step.decode_ops,
                                chunks ? step.prefill_count : step.decode_count, frame);
    return DeviceStepLaunch{launched.error, launched.launches};
  }
};

cudaError_t LaunchDecoderDynamicParallelism(const void* scheduler, const void* params,
                                            cudaStream_t stream) {
  return DynamicParallelismLaunch<DecoderDeviceStepKernels>(scheduler, params, stream);
}

cudaError_t PrepareDecoderDynamicParallelism(const std::vector<ops::OpNode>& nodes,
                                             std::uint32_t max_rows, std::uint32_t max_batch) {
  ops::OpFrame frame;  // the largest step (the header is the runtime's: none yet)
  frame.rows = max_rows;
  frame.sequences = max_batch;
  frame.serial = true;
  return ops::prepare_device_launches(nodes, frame);
}

}  // namespace baton::detail
