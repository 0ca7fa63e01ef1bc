// The synthetic step's kernel body, included by both the whole-program
// (graph engines) and the separately compiled (dynamic-parallelism) TUs, so
// both run the same code.
#pragma once

#include "baton/step_args.h"
#include "baton/synthetic_step_params.h"

namespace baton::detail {

// Kernel `kernel` of the step, for every active position (grid-stride, so any
// grid covers the batch: the graph copy is sized for its bucket, the
// dynamic-parallelism copy for the actual batch).
__device__ inline void synthetic_step_body(const StepArgs& args, const SyntheticStepParams& params,
                                           std::uint32_t kernel) {
  const std::uint32_t batch = args.header->batch;
  const bool last = kernel + 1 == params.kernels;
  for (std::uint32_t position = blockIdx.x * blockDim.x + threadIdx.x; position < batch;
       position += gridDim.x * blockDim.x) {
    const std::uint32_t step = args.item_steps[position];
    std::uint32_t& accumulator = params.accumulators[args.slots[position]];
    // A slot is reused by later items: the item's first kernel starts over.
    const std::uint32_t value =
        kernel == 0 && step == 0 ? SyntheticSeed(args.items[position].id) : accumulator;
    const std::uint32_t next = SyntheticMix(value, kernel, step);
    accumulator = next;
    if (last && step + 1 >= SyntheticSteps(args.items[position].payload)) {
      finish_item(args, position, next);
    }
  }
}

}  // namespace baton::detail
