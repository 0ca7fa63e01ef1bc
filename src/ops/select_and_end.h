// The step's last op: token selection with each position's own sampling
// parameters (ops::Select's sample_positions, from view.sampling into
// view.out_tokens) and the step's end in the same kernel
// (frame/step_frame_body.cuh's hooks): for every live position whose step
// produced a new token (its chunk reached the prompt's end, and every step
// after), appends the token to the sequence and the token stream, and
// finishes the item on one of its stop tokens, at max_new_tokens (value:
// tokens generated) or on a cancel; stamps the step clock. One node fewer
// per step than selection and an end of their own. Over the step's
// positions (a sequence node: the batch's active is &header->batch).
// Refused: capacity 0 or past view.max_batch, a null batch.active, sampling
// arrays missing, a step clock or stream window that is not a power of two.
#pragma once

#include "frame/step_view.h"
#include "kernels/select_params.h"
#include "ops/frame_args.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "frame/step_frame_body.cuh"
#include "kernels/select_body.cuh"
#endif

namespace baton::ops {

struct SelectAndEnd : KernelOp {
  static constexpr const char* kName = "select_and_end";
  struct Args : FrameArgs<SelectAndEnd> {
    const void* logits = nullptr;  // [sequences, padded_vocab]
    DecodeBatch batch;
  };

  static cudaError_t check(const Args& a) {
    const detail::DecoderStepView& v = a.view;
    const auto power_of_two = [](std::uint32_t n) { return n != 0 && (n & (n - 1)) == 0; };
    const bool ok = a.batch.capacity != 0 && a.batch.capacity <= v.max_batch &&
                    a.batch.active != nullptr &&
                    (v.step_end_ns == nullptr || power_of_two(v.step_clock_size)) &&
                    v.sequence_ids != nullptr && v.sequence_steps != nullptr &&
                    v.sampling != nullptr && (v.stream == nullptr || power_of_two(v.stream_window));
    return ok ? cudaSuccess : cudaErrorInvalidValue;
  }
  BATON_HOST_DEVICE static void bind(Args& a, const OpFrame& frame, const OpNode& node) {
    a.step = frame.args;
    bind_batch(a.batch, frame, node);
  }

#if defined(__CUDACC__)
  template <class T>
  struct Variant
      : ClusteredBlock<T, detail::decode::kSelectThreads, 0, detail::decode::kSelectMaxCluster> {};
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    const unsigned cluster =
        static_cast<unsigned>(detail::decode::select_blocks(a.view.config.vocab));
    const LaunchShape shape{dim3(cluster, a.batch.capacity), dim3(detail::decode::kSelectThreads),
                            dim3(cluster),
                            static_cast<unsigned>(sizeof(detail::decode::SelectShared<true>))};
    return with_dtype(a.view.config.dtype,
                      [&](auto t) { return f(Variant<decltype(t)>{}, shape); });
  }
  // Each position's own parameters (Sample = true decides per position: the
  // graphs are captured once and requests change).
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void* shared) {
    using T = typename V::Type;
    const detail::DecoderStepView& v = a.view;
    detail::decode::select_body<T, true>(v.config, static_cast<const T*>(a.logits), a.batch,
                                         detail::decode::SelectParams(SamplingParams{}, v.sampling),
                                         v.sequence_ids, v.sequence_steps, v.out_tokens, tile,
                                         shared_as<detail::decode::SelectShared<true>>(shared),
                                         detail::StepEndHooks{v, a.step});
  }
#endif
};

}  // namespace baton::ops
