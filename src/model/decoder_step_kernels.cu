#include <cstdint>

#include "baton/step_kernel.cuh"
#include "decoder_step.h"
#include "decoder_step_body.cuh"
#include "kernels/select_body.cuh"

namespace baton::detail {
namespace {

__global__ void step_begin_kernel(DecoderStepView v, StepArgs args, std::uint32_t capacity) {
  step_begin_body(v, args, capacity);
}

// The cluster is set at launch (launch_clustered_step_kernel).
template <class T, bool Sample>
__global__ void __launch_bounds__(decode::kSelectThreads)
    select_and_end_kernel(DecoderStepView v, StepArgs args, const T* logits, DecodeBatch batch,
                          SamplingParams sampling) {
  decode::select_body<T, Sample>(v.config, logits, batch, sampling, v.sequence_ids,
                                 v.sequence_steps, v.out_tokens, StepEndHooks{v, args});
}

unsigned blocks_for(std::uint32_t capacity) {
  return (capacity + kStepFrameThreads - 1) / kStepFrameThreads;
}

template <class T>
cudaError_t launch_select_and_end(const DecoderStepView& view, const StepArgs& args,
                                  const void* logits, DecodeBatch batch, SamplingParams sampling,
                                  cudaStream_t stream) {
  const unsigned cluster = static_cast<unsigned>(decode::select_blocks(view.config.vocab));
  const auto kernel = sampling.temperature > 0.0f ? select_and_end_kernel<T, true>
                                                  : select_and_end_kernel<T, false>;
  return launch_clustered_step_kernel(kernel, dim3(cluster, batch.capacity),
                                      dim3(decode::kSelectThreads), dim3(cluster), stream, view,
                                      args, static_cast<const T*>(logits), batch, sampling);
}

}  // namespace

cudaError_t EnqueueStepBegin(const DecoderStepView& view, const StepArgs& args,
                             std::uint32_t capacity, cudaStream_t stream) {
  if (capacity == 0 || capacity > view.max_batch) return cudaErrorInvalidValue;
  return launch_step_kernel(step_begin_kernel, dim3(blocks_for(capacity)), dim3(kStepFrameThreads),
                            0, stream, view, args, capacity);
}

cudaError_t EnqueueSelectAndEndStep(const DecoderStepView& view, const StepArgs& args,
                                    const void* logits, DecodeBatch batch, SamplingParams sampling,
                                    cudaStream_t stream) {
  if (batch.capacity == 0 || batch.capacity > view.max_batch || batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (view.step_end_ns != nullptr &&
      (view.step_clock_size == 0 || (view.step_clock_size & (view.step_clock_size - 1)) != 0)) {
    return cudaErrorInvalidValue;
  }
  if (sampling.temperature > 0.0f &&
      (view.sequence_ids == nullptr || view.sequence_steps == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return view.config.dtype == DecoderDType::kBFloat16
             ? launch_select_and_end<__nv_bfloat16>(view, args, logits, batch, sampling, stream)
             : launch_select_and_end<__half>(view, args, logits, batch, sampling, stream);
}

}  // namespace baton::detail
