// The bodies of the two kernels that frame the decoder model's step
// (decoder_step.h): step_begin, and the step's end as hooks of the token
// selection kernel. Shared by the graph path (decoder_step_kernels.cu) and the
// dynamic-parallelism step (src/dynamic_parallelism/dp_decoder_step.cu).
// Internal; Abseil-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda/ptx>

#include "baton/step_kernel.cuh"
#include "decoder_step.h"

namespace baton::detail {

inline constexpr int kStepFrameThreads = 128;  // step_begin / step_end: a thread per position

__device__ inline std::size_t sequence_index(const DecoderStepView& v, std::uint32_t entry,
                                             std::uint32_t token) {
  return static_cast<std::size_t>(entry) * static_cast<std::size_t>(v.config.max_context) + token;
}

// The host validates every entry it writes; the device re-checks what it
// indexes with, so a stale or forged item id is refused instead of reading
// out of bounds. `info` is the entry's row, loaded when item.id is in range.
__device__ inline bool entry_ok(const DecoderStepView& v, const WorkItem& item, std::uint32_t step,
                                const DecodeRequestInfo& info) {
  if (item.kind != kDecodeRequestKind || item.id >= v.max_requests) return false;
  const std::uint64_t total = static_cast<std::uint64_t>(info.prompt_tokens) + info.max_new_tokens;
  return info.prompt_tokens >= 1 && info.max_new_tokens >= 1 &&
         total <= static_cast<std::uint64_t>(v.config.max_context) &&
         static_cast<std::uint64_t>(step) + 1 < total;
}

// On the graph path both kernels are launched with launch_step_kernel: they
// may start while the node before them (the scheduler, or the token
// selection) still runs. One thread per position, `capacity` positions.
__device__ __forceinline__ void step_begin_body(DecoderStepView v, StepArgs args,
                                                std::uint32_t capacity) {
  const std::uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
  wait_for_previous_nodes();
  allow_next_node();
  if (p >= capacity) return;
  // Two dependent rounds of loads: the scheduler's outputs together, then
  // the request's entry together with its token (whose index is in bounds
  // whenever the entry's and the step's are; used only if the entry is ok).
  const std::uint32_t batch = args.header->batch;
  const WorkItem item = args.items[p];
  const std::uint32_t slot = args.slots[p];
  const std::uint32_t step = args.item_steps[p];
  if (p >= batch) return;
  DecodeRequestInfo info{};
  std::int32_t token = 0;
  if (item.id < v.max_requests && step < static_cast<std::uint32_t>(v.config.max_context)) {
    info = v.requests[item.id];
    token = v.sequences[sequence_index(v, item.id, step)];
  }
  if (slot >= v.max_batch || !entry_ok(v, item, step, info)) {
    v.request_of[p] = kNoRequest;
    v.in_tokens[p] = 0;
    v.sequence_ids[p] = 0;
    v.sequence_steps[p] = 0;
    v.sampling[p] = PositionSampling{};              // greedy
    if (slot < v.max_batch) v.positions[slot] = -1;  // the layer kernels skip it
    return;
  }
  v.request_of[p] = item.id;
  v.positions[slot] = static_cast<std::int32_t>(step);
  v.in_tokens[p] = token;
  v.sequence_ids[p] = info.sequence_id;
  v.sampling[p] = info.sampling;
  // The index of the token this step generates (0 for the last prompt token's step).
  v.sequence_steps[p] = step + 1 >= info.prompt_tokens ? step + 1 - info.prompt_tokens : 0;
}

// The step clock: the global timer of step header->step, once per step.
__device__ inline void stamp_step(const DecoderStepView& v, const StepArgs& args) {
  if (v.step_end_ns != nullptr) {
    v.step_end_ns[args.header->step & (v.step_clock_size - 1)] = cuda::ptx::get_sreg_globaltimer();
  }
}

// What the end of position p's step needs besides its token, all final
// before the step's last node begins (the request table is host-written, the
// entry and step come from step_begin and the scheduler): loaded before that
// node's wait, off the critical path.
struct PositionEnd {
  std::uint32_t entry = kNoRequest;
  DecodeRequestInfo info{};
  std::uint32_t step = 0;
};

__device__ inline PositionEnd load_position_end(const DecoderStepView& v, const StepArgs& args,
                                                std::uint32_t p) {
  PositionEnd e;
  e.entry = v.request_of[p];
  e.step = args.item_steps[p];
  if (e.entry < v.max_requests) e.info = v.requests[e.entry];
  return e;
}

// Position p's end of step, given the token the step chose for it: appends
// the token to the sequence and finishes the item on its stop token or limit
// (a refused item finishes with kRefusedRequest).
__device__ inline void end_position(const DecoderStepView& v, const StepArgs& args, std::uint32_t p,
                                    const PositionEnd& e, std::int32_t token) {
  if (e.entry == kNoRequest) {
    finish_item(args, p, kRefusedRequest);
    return;
  }
  if (e.step + 1 < e.info.prompt_tokens) return;  // still reading the prompt
  const std::uint32_t generated = e.step + 2 - e.info.prompt_tokens;
  v.sequences[sequence_index(v, e.entry, e.step + 1)] = token;
  bool stop = generated >= e.info.max_new_tokens;
  // The host writes at most kEntryStopTokens; the bound guards a forged count.
  for (std::uint32_t i = 0; i < e.info.stop_count && i < kEntryStopTokens; ++i) {
    stop = stop || token == e.info.stop_tokens[i];
  }
  if (stop) finish_item(args, p, generated);
}

// The step ends inside the token selection kernel (select_body's hooks):
// the stamp when the selection starts (the logits are final), each
// position's end as soon as its token is chosen. One node fewer per step.
struct StepEndHooks {
  DecoderStepView v;
  StepArgs args;
  PositionEnd end{};
  __device__ void prepare(std::uint32_t p) { end = load_position_end(v, args, p); }
  __device__ void entered() const {
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) stamp_step(v, args);
  }
  __device__ void chose(std::uint32_t p, std::int32_t token) const {
    end_position(v, args, p, end, token);
  }
};

}  // namespace baton::detail
