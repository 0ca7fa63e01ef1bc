#include "baton/step_kernel.cuh"
#include "token_schedule_test_kernels.h"

namespace baton::test {
namespace {

constexpr int kThreads = 128;

__global__ void recording_step(StepArgs args, StepHeader* headers, RecordedPosition* positions,
                               std::uint32_t max_steps) {
  wait_for_previous_nodes();
  const StepHeader header = *args.header;
  const std::uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
  if (header.batch == 0) return;  // an emptied step of a multi-step graph
  const bool recorded = header.step < max_steps;
  if (recorded && p == 0) headers[header.step] = header;
  if (p >= header.batch) return;
  const WorkItem item = args.items[p];
  RecordedPosition r;
  r.id = item.id;
  r.slot = args.slots[p];
  r.item_tokens = args.item_tokens[p];
  r.tokens = args.tokens[p];
  r.offset = args.token_offsets[p];
  if (recorded) positions[header.step * args.max_batch + p] = r;
  if (FinishesNow(item.id, InputTokens(item), r.item_tokens, r.tokens)) {
    finish_item(args, p, OutputsOf(item.id));
  }
}

}  // namespace

cudaError_t EnqueueRecordingStep(const StepArgs& args, std::uint32_t bucket_size,
                                 StepHeader* headers, RecordedPosition* positions,
                                 std::uint32_t max_steps, cudaStream_t stream) {
  // Positions, not rows, need threads: at most max_batch of them.
  const std::uint32_t positions_covered =
      bucket_size < args.max_batch ? bucket_size : args.max_batch;
  const dim3 blocks((positions_covered + kThreads - 1) / kThreads);
  return launch_step_kernel(recording_step, blocks, dim3(kThreads), 0, stream, args, headers,
                            positions, max_steps);
}

}  // namespace baton::test
