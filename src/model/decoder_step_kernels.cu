#include <cstdint>

#include "baton/step_launch.cuh"
#include "decoder_step.h"
#include "decoder_step_body.cuh"

namespace baton::detail {
namespace {

__global__ void step_begin_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_begin_body(v, args, capacity);
}

__global__ void step_end_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_end_body(v, args, capacity);
}

unsigned blocks_for(std::uint32_t capacity) {
  return (capacity + kStepFrameThreads - 1) / kStepFrameThreads;
}

}  // namespace

cudaError_t EnqueueStepBegin(const DecoderStepView& view, const StepArgs& args,
                             std::uint32_t capacity, cudaStream_t stream) {
  if (capacity == 0 || capacity > view.max_batch) return cudaErrorInvalidValue;
  return launch_step_kernel(step_begin_kernel, dim3(blocks_for(capacity)), dim3(kStepFrameThreads),
                            0, stream, view, args, capacity);
}

cudaError_t EnqueueStepEnd(const DecoderStepView& view, const StepArgs& args,
                           std::uint32_t capacity, cudaStream_t stream) {
  if (capacity == 0 || capacity > view.max_batch) return cudaErrorInvalidValue;
  if (view.step_end_ns != nullptr &&
      (view.step_clock_size == 0 || (view.step_clock_size & (view.step_clock_size - 1)) != 0)) {
    return cudaErrorInvalidValue;
  }
  return launch_step_kernel(step_end_kernel, dim3(blocks_for(capacity)), dim3(kStepFrameThreads), 0,
                            stream, view, args, capacity);
}

}  // namespace baton::detail
