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
// Each position's own parameters (Sample = true decides per position: the
// graphs are captured once and requests change).
template <class T>
__global__ void __launch_bounds__(decode::kSelectThreads)
    select_and_end_kernel(DecoderStepView v, StepArgs args, const T* logits, DecodeBatch batch) {
  decode::select_body<T, true>(v.config, logits, batch,
                               decode::SelectParams(SamplingParams{}, v.sampling), v.sequence_ids,
                               v.sequence_steps, v.out_tokens, StepEndHooks{v, args});
}

template <class T>
cudaError_t launch_select_and_end(const DecoderStepView& view, const StepArgs& args,
                                  const void* logits, DecodeBatch batch, cudaStream_t stream) {
  const unsigned cluster = static_cast<unsigned>(decode::select_blocks(view.config.vocab));
  return launch_clustered_step_kernel(select_and_end_kernel<T>, dim3(cluster, batch.capacity),
                                      dim3(decode::kSelectThreads), dim3(cluster), stream, view,
                                      args, static_cast<const T*>(logits), batch);
}

}  // namespace

cudaError_t EnqueueStepBegin(const DecoderStepView& view, const StepArgs& args,
                             std::uint32_t capacity, cudaStream_t stream) {
  if (capacity == 0 || capacity > view.max_batch) return cudaErrorInvalidValue;
  return launch_step_kernel(step_begin_kernel, dim3(capacity), dim3(kStepFrameThreads), 0, stream,
                            view, args, capacity);
}

cudaError_t EnqueueSelectAndEndStep(const DecoderStepView& view, const StepArgs& args,
                                    const void* logits, DecodeBatch batch, cudaStream_t stream) {
  if (batch.capacity == 0 || batch.capacity > view.max_batch || batch.active == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (view.step_end_ns != nullptr &&
      (view.step_clock_size == 0 || (view.step_clock_size & (view.step_clock_size - 1)) != 0)) {
    return cudaErrorInvalidValue;
  }
  if (view.sequence_ids == nullptr || view.sequence_steps == nullptr || view.sampling == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (view.stream != nullptr &&
      (view.stream_window == 0 || (view.stream_window & (view.stream_window - 1)) != 0)) {
    return cudaErrorInvalidValue;
  }
  return view.config.dtype == DecoderDType::kBFloat16
             ? launch_select_and_end<__nv_bfloat16>(view, args, logits, batch, stream)
             : launch_select_and_end<__half>(view, args, logits, batch, stream);
}

}  // namespace baton::detail
