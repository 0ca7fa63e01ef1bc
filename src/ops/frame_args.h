// What the two ops that frame a step read first (ops/step_begin.h,
// ops/select_and_end.h): the step's frame (frame/step_view.h) and the
// scheduler's arguments, bound per launch.
#pragma once

#include "baton/step_args.h"
#include "frame/step_view.h"

namespace baton::ops {

template <class O>
struct FrameArgs {
  using Op = O;
  detail::DecoderStepView view;
  StepArgs step;
};

}  // namespace baton::ops
