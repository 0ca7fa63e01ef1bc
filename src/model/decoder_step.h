// The device state of the decoder model's step and the two kernels that frame
// it: step_begin turns the scheduler's batch (StepArgs) into the model's
// inputs, the token selection kernel ends the step by turning the chosen
// tokens back into sequence text and finish_item calls. Between them run the layer kernels
// (kernels/decode_kernels.h) and the projections. Abseil-free: .cu files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "baton/step_args.h"
#include "decoder_model_types.h"
#include "kernels/decode_kernels.h"

namespace baton::detail {

// Device pointers, passed by value and baked into the captured graphs.
struct DecoderStepView {
  DecoderConfig config;
  std::uint32_t max_batch = 0;     // positions and slots
  std::uint32_t max_requests = 0;  // request table entries
  // Request table (see DecoderModel::WriteRequests).
  const DecodeRequestInfo* requests = nullptr;  // [max_requests]
  std::int32_t* sequences = nullptr;            // [max_requests, max_context] prompt | generated
  // Per step, by batch position.
  std::int32_t* in_tokens = nullptr;        // [max_batch] this step's input token
  std::int32_t* out_tokens = nullptr;       // [max_batch] the token the step chose
  std::uint64_t* sequence_ids = nullptr;    // [max_batch] sampling key
  std::uint32_t* sequence_steps = nullptr;  // [max_batch] sampling step (generated so far)
  PositionSampling* sampling = nullptr;     // [max_batch] the request's sampling parameters
  std::uint32_t* request_of = nullptr;      // [max_batch] entry, or kNoRequest when refused
  // Per slot: this token's index in its sequence (= KV entries before it).
  std::int32_t* positions = nullptr;  // [max_batch]
  // Step clock: globaltimer when step s's token selection starts (its logits
  // are final) lands in step_end_ns[s % step_clock_size].
  unsigned long long* step_end_ns = nullptr;
  std::uint32_t step_clock_size = 0;  // power of two
};

inline constexpr std::uint32_t kNoRequest = 0xffffffffu;

// step_begin: for every live position p, validates the item's request entry,
// sets the sequence's position (= the item's step count: prefill feeds one
// prompt token per step) and the input token (the prompt's, then the last
// generated one). A refused item (entry out of range) gets position -1, which
// the layer kernels skip, and is finished with kRefusedRequest by step_end.
[[nodiscard]] cudaError_t EnqueueStepBegin(const DecoderStepView& view, const StepArgs& args,
                                           std::uint32_t capacity, cudaStream_t stream);

// Token selection with each position's own sampling parameters
// (EnqueueSamplePositions, view.sampling, into view.out_tokens) and the
// step's end in the same kernel: for every live position whose step produced
// a new token (the last prompt token and after), appends the token to the
// sequence and finishes the item on one of its stop tokens or at
// max_new_tokens (value: tokens generated); stamps the step clock. `batch` is
// the step's (active = &header->batch).
[[nodiscard]] cudaError_t EnqueueSelectAndEndStep(const DecoderStepView& view, const StepArgs& args,
                                                  const void* logits, DecodeBatch batch,
                                                  cudaStream_t stream);

}  // namespace baton::detail
