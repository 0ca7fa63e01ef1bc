// The step's first op: the scheduler's batch (StepArgs: positions, each with
// a chunk of rows) into the decoder's inputs by row (frame/step_view.h).
//
// For every live position p it validates the item's request entry (the
// item's input length must be its prompt's), and for each of its tokens[p]
// rows sets the row's slot, sequence index (the tokens the item ran before,
// plus the row's place in the chunk), fresh count and input token (the
// prompt's, then the last generated one); it sets the position's logits row
// (its last row), chunk start, sampling key and parameters. A refused item's
// rows get index -1, which the layer ops skip, and the step's end finishes it
// with kRefusedRequest. One block per position, no shared memory.
#pragma once

#include <cstdint>

#include "frame/step_view.h"
#include "ops/frame_args.h"
#include "ops/op.h"
#if defined(__CUDACC__)
#include "frame/step_frame_body.cuh"
#endif

namespace baton::ops {

struct StepBegin : KernelOp {
  static constexpr const char* kName = "step_begin";
  struct Args : FrameArgs<StepBegin> {
    std::uint32_t capacity = 0;  // positions
  };

  // capacity in [1, view.max_batch].
  static cudaError_t check(const Args& a) {
    return a.capacity == 0 || a.capacity > a.view.max_batch ? cudaErrorInvalidValue : cudaSuccess;
  }
  BATON_HOST_DEVICE static void bind(Args& a, const OpFrame& frame, const OpNode&) {
    a.step = frame.args;
    a.capacity = frame.sequences;
  }

  struct Variant : Block<void, detail::kStepFrameThreads> {};
  BATON_CALLS_EITHER_SIDE
  template <class Launch, class F>
  BATON_HOST_DEVICE static cudaError_t select(const Args& a, F&& f) {
    return f(Variant{}, LaunchShape{dim3(a.capacity), dim3(Variant::kThreads)});
  }
#if defined(__CUDACC__)
  template <class V>
  __device__ static void run(const Args& a, Tile tile, void*) {
    detail::step_begin_body(a.view, a.step, a.capacity, tile);
  }
#endif
};

}  // namespace baton::ops
